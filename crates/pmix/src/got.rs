//! Redirecting one loaded library's calls to a libc function: its GOT
//! slots for that import ([`crate::elf`]) are overwritten with another
//! function's address, so that only that library's calls reach it — the
//! rest of the process keeps libc's. Used by the PMIx guard
//! (`dpm_daemon::pmix_guard`) on `libpmix.so.2`'s `accept` and `read`.
//!
//! The library is found in memory by an address inside it (one of its
//! functions): `dl_iterate_phdr` names the object whose segments hold it,
//! its load base and its file. The file's dynamic section is read
//! ([`crate::elf::read_imports`]) and checked against the object's program
//! headers in memory, so what is patched is what was read. Slots are
//! written after the loader has bound them (`RTLD_NOW`) and before the
//! library's threads run; a slot in `PT_GNU_RELRO` is made writable for
//! the store and read-only again after it.
use crate::elf::{Library, SlotKind};
use std::ffi::CStr;
use std::path::PathBuf;

/// Why a library's calls could not be redirected.
#[derive(Debug, thiserror::Error)]
pub enum GotError {
    #[error("no loaded object holds address {0:#x}")]
    NotLoaded(usize),
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Elf { path: PathBuf, source: crate::elf::ElfError },
    #[error("{path} on disk is not the library in memory (its program headers differ)")]
    Changed { path: PathBuf },
    #[error("{path} refers to {name} in a way that cannot be redirected (relocation type {kind})")]
    Unbindable { path: PathBuf, name: String, kind: u32 },
    #[error("{path}: a slot for {name} at {vaddr:#x} lies outside its writable segments")]
    Outside { path: PathBuf, name: String, vaddr: u64 },
    #[error("cannot make {path}'s relocated data writable: {source}")]
    Protect { path: PathBuf, source: std::io::Error },
}

/// A library as loaded in this process.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Its file (as the loader found it).
    pub path: PathBuf,
    /// Its load base: file vaddr + base = address in memory.
    pub base: usize,
    /// What its file says it imports.
    pub library: Library,
}

/// One program header of the object in memory: (type, vaddr, memsz).
type MemPhdr = (u32, u64, u64);

struct Found {
    at: usize,
    hit: Option<(usize, PathBuf, Vec<MemPhdr>)>,
}

unsafe extern "C" fn each_object(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut libc::c_void) -> libc::c_int {
    // SAFETY: data is the &mut Found passed to dl_iterate_phdr below, alive
    // for the whole iteration; info is the loader's record for one object,
    // valid during this callback, its dlpi_phdr array holding dlpi_phnum
    // entries.
    let (found, info) = unsafe { (&mut *data.cast::<Found>(), &*info) };
    // SAFETY: as above.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let base = info.dlpi_addr as usize;
    let holds = phdrs.iter().any(|p| p.p_type == libc::PT_LOAD && found.at >= base + p.p_vaddr as usize && found.at < base + (p.p_vaddr + p.p_memsz) as usize);
    if !holds {
        return 0;
    }
    let name = if info.dlpi_name.is_null() {
        PathBuf::new()
    } else {
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: a non-null dlpi_name is the loader's NUL-terminated path.
        PathBuf::from(std::ffi::OsStr::from_bytes(unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes()))
    };
    found.hit = Some((base, name, phdrs.iter().map(|p| (p.p_type, p.p_vaddr, p.p_memsz)).collect()));
    1
}

impl Loaded {
    /// The loaded object holding address `inside` (a function of it), and
    /// its file's imports.
    pub fn containing(inside: usize) -> Result<Loaded, GotError> {
        let mut found = Found { at: inside, hit: None };
        // SAFETY: each_object matches dl_iterate_phdr's callback type and
        // only reads the records it is given; found outlives the call.
        unsafe { libc::dl_iterate_phdr(Some(each_object), (&mut found as *mut Found).cast()) };
        let (base, path, phdrs) = found.hit.ok_or(GotError::NotLoaded(inside))?;
        let bytes = std::fs::read(&path).map_err(|source| GotError::Read { path: path.clone(), source })?;
        let library = crate::elf::read_imports(&bytes).map_err(|source| GotError::Elf { path: path.clone(), source })?;
        let dynamic = phdrs.iter().find(|p| p.0 == libc::PT_DYNAMIC).map(|p| p.1);
        let loads: Vec<(u64, u64)> = phdrs.iter().filter(|p| p.0 == libc::PT_LOAD).map(|p| (p.1, p.2)).collect();
        let file_loads: Vec<(u64, u64)> = library.segments.iter().map(|s| (s.vaddr, s.memsz)).collect();
        if dynamic != Some(library.dynamic) || loads != file_loads {
            return Err(GotError::Changed { path });
        }
        Ok(Loaded { path, base, library })
    }

    /// Points every slot of this library for `name` at `to`; returns how
    /// many slots were written (0: the library does not import `name`).
    ///
    /// # Safety
    /// `to` is a function with the ABI and contract of the libc function
    /// `name`; no thread runs the library's code while its slots change
    /// (each store is one aligned word, but a call between two slots'
    /// stores would reach either function).
    pub unsafe fn bind(&self, name: &str, to: usize) -> Result<usize, GotError> {
        let mut written = 0;
        for slot in self.library.slots(name) {
            if let SlotKind::Other(kind) = slot.kind {
                return Err(GotError::Unbindable { path: self.path.clone(), name: name.to_string(), kind });
            }
            let inside = |start: u64, size: u64| slot.vaddr >= start && slot.vaddr + 8 <= start + size;
            if !self.library.segments.iter().any(|s| s.writable && inside(s.vaddr, s.memsz)) {
                return Err(GotError::Outside { path: self.path.clone(), name: name.to_string(), vaddr: slot.vaddr });
            }
            let addr = self.base + slot.vaddr as usize;
            let relro = self.library.relro.is_some_and(|(start, size)| inside(start, size));
            let page = page_size();
            let page_start = addr & !(page - 1);
            if relro {
                // SAFETY: the page holds this library's relocated data (its
                // RELRO segment, mapped read-only by the loader); making it
                // writable changes no byte.
                protect(page_start, page, libc::PROT_READ | libc::PROT_WRITE).map_err(|source| GotError::Protect { path: self.path.clone(), source })?;
            }
            // SAFETY: addr is a GOT slot of this library (a relocation's
            // target inside a writable or just unprotected segment, 8-byte
            // aligned as every slot is), holding a function address; the
            // caller guarantees `to` may stand in for it.
            unsafe { std::ptr::write_volatile(addr as *mut usize, to) };
            if relro {
                // SAFETY: back to what the loader made it.
                protect(page_start, page, libc::PROT_READ).map_err(|source| GotError::Protect { path: self.path.clone(), source })?;
            }
            written += 1;
        }
        Ok(written)
    }

    /// What `name`'s slots hold now (their first; `None` when not imported).
    pub fn bound(&self, name: &str) -> Option<usize> {
        let slot = self.library.slots(name).next()?;
        // SAFETY: a slot of this library, mapped and readable (checked as
        // in bind by the segment test of the caller's earlier bind; a
        // relocation target is always inside a loaded segment).
        Some(unsafe { std::ptr::read_volatile((self.base + slot.vaddr as usize) as *const usize) })
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

fn protect(page: usize, len: usize, prot: libc::c_int) -> std::io::Result<()> {
    // SAFETY: page is page-aligned and mapped (a loaded segment of a
    // library); only its protection changes.
    if unsafe { libc::mprotect(page as *mut libc::c_void, len, prot) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::tests::build_so;

    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    unsafe extern "C" fn fake_accept(_fd: libc::c_int, _a: *mut libc::sockaddr, _l: *mut libc::socklen_t) -> libc::c_int {
        CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        -42
    }

    /// Loads a library whose `take` calls `accept`, binds its slot, and
    /// checks that its call (and only its) reaches the stand-in.
    fn bound_call(name: &str, extra: &[&str]) {
        let so = build_so(name, "#include <sys/socket.h>\nint take(int fd) { return accept(fd, 0, 0); }\n", extra);
        // SAFETY: a test library whose constructors do nothing; RTLD_NOW binds its slots now.
        let lib = unsafe { libloading::os::unix::Library::open(Some(&so), libc::RTLD_NOW | libc::RTLD_LOCAL) }.unwrap();
        // SAFETY: take's C signature.
        let take = unsafe { lib.get::<unsafe extern "C" fn(libc::c_int) -> libc::c_int>(b"take\0") }.unwrap();
        let loaded = Loaded::containing(*take as usize).unwrap();
        assert_eq!(loaded.path.canonicalize().unwrap(), so.canonicalize().unwrap());
        // SAFETY: fake_accept has accept's ABI; nothing else runs the test library.
        let n = unsafe { loaded.bind("accept", fake_accept as *const () as usize) }.unwrap();
        assert!(n >= 1);
        assert_eq!(loaded.bound("accept"), Some(fake_accept as *const () as usize));
        let before = CALLS.load(std::sync::atomic::Ordering::SeqCst);
        // SAFETY: take only calls accept, now the stand-in.
        assert_eq!(unsafe { take(-1) }, -42);
        assert_eq!(CALLS.load(std::sync::atomic::Ordering::SeqCst), before + 1);
        // The rest of the process still has libc's accept.
        // SAFETY: an invalid fd: accept fails with EBADF.
        assert_eq!(unsafe { libc::accept(-1, std::ptr::null_mut(), std::ptr::null_mut()) }, -1);
        assert_eq!(CALLS.load(std::sync::atomic::Ordering::SeqCst), before + 1);
        // The same answer twice: binding again is harmless.
        // SAFETY: as above.
        assert!(unsafe { loaded.bind("accept", fake_accept as *const () as usize) }.is_ok());
        assert_eq!(loaded.library.slots("read").count(), 0);
        // A RELRO slot is read-only again.
        let slot = loaded.base + loaded.library.slots("accept").next().unwrap().vaddr as usize;
        if loaded.library.relro.is_some_and(|(s, n)| (loaded.base + s as usize..loaded.base + (s + n) as usize).contains(&slot)) {
            assert_eq!(perms(slot), "r--p", "the RELRO page after the bind");
        }
    }

    /// The permissions of the mapping holding `addr` (/proc/self/maps).
    fn perms(addr: usize) -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let mut f = line.split_whitespace();
            let (range, perms) = (f.next().unwrap(), f.next().unwrap());
            let (lo, hi) = range.split_once('-').unwrap();
            if (usize::from_str_radix(lo, 16).unwrap()..usize::from_str_radix(hi, 16).unwrap()).contains(&addr) {
                return perms.to_string();
            }
        }
        panic!("{addr:#x} is not mapped")
    }

    #[test]
    fn a_plt_call_is_redirected_for_that_library_only() {
        bound_call("got_plt", &[]);
    }

    #[test]
    fn a_no_plt_call_in_relro_is_redirected_and_stays_read_only() {
        let so = build_so("relro_probe", "int x;\n", &["-Wl,-z,relro,-z,now"]);
        assert!(crate::elf::read_imports(&std::fs::read(so).unwrap()).unwrap().relro.is_some());
        bound_call("got_relro", &["-fno-plt", "-Wl,-z,relro,-z,now"]);
    }

    #[test]
    fn an_address_in_no_library_is_not_loaded() {
        assert!(matches!(Loaded::containing(8), Err(GotError::NotLoaded(8))));
    }
}
