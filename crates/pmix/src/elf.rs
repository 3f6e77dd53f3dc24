//! What a shared library imports, and where its references to each import
//! live: a minimal reader of an ELF64 little-endian file's dynamic section
//! (program headers, `PT_DYNAMIC`, `.dynsym`/`.dynstr` through `DT_SYMTAB`/
//! `DT_STRTAB`, `DT_RELA` and `DT_JMPREL`), for the PMIx guard
//! (`dpm_daemon::pmix_guard`): which libc calls `libpmix.so.2` makes, and
//! the GOT slots ([`crate::got`]) its calls to one of them go through.
//!
//! Only what the loader itself reads is read (no section headers: a
//! stripped library has the same answer). Every offset is checked against
//! the file's length; a malformed file is an [`ElfError`], never a panic.
//! Machines: x86-64 and AArch64 (the targets dpm is built for).

/// Why a file could not be read as a library.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ElfError {
    #[error("not an ELF64 little-endian file")]
    NotElf64,
    #[error("ELF machine {0} is not x86-64 or AArch64")]
    Machine(u16),
    #[error("no dynamic section (not a shared library)")]
    NoDynamic,
    #[error("malformed: {0}")]
    Malformed(&'static str),
}

/// How a GOT slot refers to its symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotKind {
    /// A PLT call's slot (`R_*_JUMP_SLOT`).
    JumpSlot,
    /// A `-fno-plt` call's or an address-taken function's slot (`R_*_GLOB_DAT`).
    GlobDat,
    /// A function pointer in data (`R_X86_64_64`/`R_AARCH64_ABS64`, addend 0).
    Absolute,
    /// Any other relocation type: a reference the guard cannot redirect.
    Other(u32),
}

/// One reference of the library to an undefined (imported) symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    pub name: String,
    /// The slot's address relative to the load base.
    pub vaddr: u64,
    pub kind: SlotKind,
    pub addend: i64,
}

/// A loadable segment: where it is, whether it is writable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub memsz: u64,
    pub writable: bool,
}

/// What [`read_imports`] learns of a library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Library {
    /// Every relocation that names an undefined symbol.
    pub imports: Vec<Import>,
    /// `PT_LOAD` segments.
    pub segments: Vec<Segment>,
    /// `PT_GNU_RELRO`: read-only after relocation (vaddr, size).
    pub relro: Option<(u64, u64)>,
    /// `PT_DYNAMIC`'s vaddr: matched against the loaded object's.
    pub dynamic: u64,
}

impl Library {
    /// Whether the library calls (or takes the address of) `name`.
    pub fn imports(&self, name: &str) -> bool {
        self.imports.iter().any(|i| i.name == name)
    }

    /// The references to `name`.
    pub fn slots<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Import> + 'a {
        self.imports.iter().filter(move |i| i.name == name)
    }
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_GNU_RELRO: u32 = 0x6474_e552;
const PF_W: u32 = 2;
const DT_NULL: u64 = 0;
const DT_PLTRELSZ: u64 = 2;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_RELA: u64 = 7;
const DT_RELASZ: u64 = 8;
const DT_STRSZ: u64 = 10;
const DT_SYMENT: u64 = 11;
const DT_PLTREL: u64 = 20;
const DT_JMPREL: u64 = 23;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;
const SYM_SIZE: u64 = 24;
const RELA_SIZE: u64 = 24;

fn slice(bytes: &[u8], at: u64, len: u64) -> Result<&[u8], ElfError> {
    let end = at.checked_add(len).ok_or(ElfError::Malformed("offset overflows"))?;
    let (at, end) = (usize::try_from(at).map_err(|_| ElfError::Malformed("offset"))?, usize::try_from(end).map_err(|_| ElfError::Malformed("offset"))?);
    bytes.get(at..end).ok_or(ElfError::Malformed("past the end of the file"))
}

fn u16_at(b: &[u8], at: u64) -> Result<u16, ElfError> {
    Ok(u16::from_le_bytes(slice(b, at, 2)?.try_into().expect("2 bytes")))
}
fn u32_at(b: &[u8], at: u64) -> Result<u32, ElfError> {
    Ok(u32::from_le_bytes(slice(b, at, 4)?.try_into().expect("4 bytes")))
}
fn u64_at(b: &[u8], at: u64) -> Result<u64, ElfError> {
    Ok(u64::from_le_bytes(slice(b, at, 8)?.try_into().expect("8 bytes")))
}

/// A `PT_LOAD` with its file offset, for address translation.
struct Load {
    vaddr: u64,
    offset: u64,
    filesz: u64,
}

fn file_offset(loads: &[Load], vaddr: u64) -> Result<u64, ElfError> {
    loads
        .iter()
        .find(|l| vaddr >= l.vaddr && vaddr - l.vaddr < l.filesz)
        .and_then(|l| (vaddr - l.vaddr).checked_add(l.offset))
        .ok_or(ElfError::Malformed("an address outside the file's segments"))
}

/// Reads `bytes` (a whole library file): its imports and segments.
pub fn read_imports(bytes: &[u8]) -> Result<Library, ElfError> {
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return Err(ElfError::NotElf64);
    }
    let machine = u16_at(bytes, 18)?;
    let (jump_slot, glob_dat, absolute) = match machine {
        EM_X86_64 => (7, 6, 1),
        EM_AARCH64 => (1026, 1025, 257),
        m => return Err(ElfError::Machine(m)),
    };
    let (phoff, phentsize, phnum) = (u64_at(bytes, 32)?, u64::from(u16_at(bytes, 54)?), u64::from(u16_at(bytes, 56)?));
    if phentsize < 56 {
        return Err(ElfError::Malformed("program header size"));
    }
    let (mut loads, mut segments, mut relro, mut dynamic) = (Vec::new(), Vec::new(), None, None);
    for i in 0..phnum {
        let at = i.checked_mul(phentsize).and_then(|o| o.checked_add(phoff)).ok_or(ElfError::Malformed("program headers"))?;
        let (kind, flags, offset, vaddr, filesz, memsz) =
            (u32_at(bytes, at)?, u32_at(bytes, at + 4)?, u64_at(bytes, at + 8)?, u64_at(bytes, at + 16)?, u64_at(bytes, at + 32)?, u64_at(bytes, at + 40)?);
        match kind {
            PT_LOAD => {
                loads.push(Load { vaddr, offset, filesz });
                segments.push(Segment { vaddr, memsz, writable: flags & PF_W != 0 });
            }
            PT_DYNAMIC => dynamic = Some((offset, filesz, vaddr)),
            PT_GNU_RELRO => relro = Some((vaddr, memsz)),
            _ => {}
        }
    }
    let (dyn_off, dyn_size, dyn_vaddr) = dynamic.ok_or(ElfError::NoDynamic)?;
    let mut tags = std::collections::HashMap::new();
    for i in 0..dyn_size / 16 {
        let tag = u64_at(bytes, dyn_off.wrapping_add(i * 16))?;
        if tag == DT_NULL {
            break;
        }
        tags.entry(tag).or_insert(u64_at(bytes, dyn_off.wrapping_add(i * 16 + 8))?);
    }
    let tag = |t: u64| tags.get(&t).copied();
    let symtab = file_offset(&loads, tag(DT_SYMTAB).ok_or(ElfError::Malformed("no DT_SYMTAB"))?)?;
    let strtab = file_offset(&loads, tag(DT_STRTAB).ok_or(ElfError::Malformed("no DT_STRTAB"))?)?;
    let strsz = tag(DT_STRSZ).ok_or(ElfError::Malformed("no DT_STRSZ"))?;
    if tag(DT_SYMENT).is_some_and(|s| s != SYM_SIZE) {
        return Err(ElfError::Malformed("symbol size"));
    }
    let strings = slice(bytes, strtab, strsz)?;
    let mut tables = Vec::new();
    if let (Some(at), Some(size)) = (tag(DT_RELA), tag(DT_RELASZ)) {
        tables.push((at, size));
    }
    if let (Some(at), Some(size)) = (tag(DT_JMPREL), tag(DT_PLTRELSZ)) {
        if tag(DT_PLTREL).is_some_and(|k| k != DT_RELA) {
            return Err(ElfError::Malformed("PLT relocations without addends (DT_REL)"));
        }
        tables.push((at, size));
    }
    let mut imports = Vec::new();
    for (at, size) in tables {
        let at = file_offset(&loads, at)?;
        for i in 0..size / RELA_SIZE {
            let r = at.wrapping_add(i * RELA_SIZE);
            let (offset, info, addend) = (u64_at(bytes, r)?, u64_at(bytes, r + 8)?, u64_at(bytes, r + 16)? as i64);
            let (sym, kind) = (info >> 32, (info & 0xffff_ffff) as u32);
            if sym == 0 {
                continue;
            }
            let s = sym.checked_mul(SYM_SIZE).and_then(|o| o.checked_add(symtab)).ok_or(ElfError::Malformed("symbol index"))?;
            let (name_at, shndx) = (u32_at(bytes, s)?, u16_at(bytes, s + 6)?);
            if shndx != 0 {
                continue; // defined here: not an import
            }
            let name = strings.get(name_at as usize..).ok_or(ElfError::Malformed("symbol name"))?;
            let name = name.split(|b| *b == 0).next().unwrap_or_default();
            let kind = match kind {
                k if k == jump_slot => SlotKind::JumpSlot,
                k if k == glob_dat => SlotKind::GlobDat,
                k if k == absolute && addend == 0 => SlotKind::Absolute,
                k => SlotKind::Other(k),
            };
            imports.push(Import { name: String::from_utf8_lossy(name).into_owned(), vaddr: offset, kind, addend });
        }
    }
    Ok(Library { imports, segments, relro, dynamic: dyn_vaddr })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// Builds `source` (C) into a shared library in a temporary directory,
    /// with `cc` (which scripts/setup.sh installs).
    pub(crate) fn build_so(name: &str, source: &str, extra: &[&str]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("dpm-elf-test.{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, so) = (dir.join(format!("{name}.c")), dir.join(format!("{name}.so")));
        std::fs::write(&src, source).unwrap();
        let out = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&so)
            .arg(&src)
            .args(extra)
            .output()
            .expect("cc (the C compiler scripts/setup.sh installs)");
        assert!(out.status.success(), "cc {name}: {}", String::from_utf8_lossy(&out.stderr));
        so
    }

    fn imports_of(path: &Path) -> Library {
        read_imports(&std::fs::read(path).unwrap()).unwrap()
    }

    const ACCEPT_READ: &str =
        "#include <sys/socket.h>\n#include <unistd.h>\nint take(int fd) { char b[4]; int s = accept(fd, 0, 0); return s < 0 ? s : (int)read(s, b, 4); }\n";
    const ACCEPT4: &str = "#define _GNU_SOURCE\n#include <sys/socket.h>\n#include <sys/uio.h>\nint take(int fd) { char b[4]; struct iovec v = { b, 4 }; int s = accept4(fd, 0, 0, SOCK_CLOEXEC); return s < 0 ? s : (int)readv(s, &v, 1); }\n";

    #[test]
    fn a_library_calling_accept_and_read_imports_them_through_slots() {
        let lib = imports_of(&build_so("accept_read", ACCEPT_READ, &[]));
        assert!(lib.imports("accept") && lib.imports("read"), "{:?}", lib.imports);
        assert!(!lib.imports("accept4") && !lib.imports("readv"));
        for name in ["accept", "read"] {
            let slots: Vec<_> = lib.slots(name).collect();
            assert!(!slots.is_empty());
            assert!(slots.iter().all(|s| matches!(s.kind, SlotKind::JumpSlot | SlotKind::GlobDat)), "{slots:?}");
            // Each slot is in a writable segment (RELRO or not).
            assert!(slots.iter().all(|s| lib.segments.iter().any(|g| g.writable && s.vaddr >= g.vaddr && s.vaddr < g.vaddr + g.memsz)));
        }
        assert!(lib.dynamic > 0);
    }

    #[test]
    fn a_library_calling_accept4_and_readv_is_seen_to() {
        let lib = imports_of(&build_so("accept4", ACCEPT4, &[]));
        assert!(lib.imports("accept4") && lib.imports("readv"), "{:?}", lib.imports);
        assert!(!lib.imports("accept") && !lib.imports("read"));
    }

    #[test]
    fn without_a_plt_calls_go_through_glob_dat_slots_in_relro() {
        let lib = imports_of(&build_so("noplt", ACCEPT_READ, &["-fno-plt", "-Wl,-z,relro,-z,now"]));
        let slots: Vec<_> = lib.slots("accept").collect();
        assert!(slots.iter().any(|s| s.kind == SlotKind::GlobDat), "{slots:?}");
        let (start, size) = lib.relro.expect("-z relro");
        assert!(slots.iter().all(|s| s.vaddr >= start && s.vaddr < start + size), "in RELRO: {slots:?}");
    }

    #[test]
    fn malformed_files_are_errors_not_panics() {
        assert_eq!(read_imports(b"not an elf"), Err(ElfError::NotElf64));
        let good = std::fs::read(build_so("trunc", ACCEPT_READ, &[])).unwrap();
        for len in [64, 200, 1000, good.len() / 2] {
            assert!(read_imports(&good[..len]).is_err(), "truncated to {len}");
        }
        // Every single-byte corruption of the headers is handled.
        for at in 0..256 {
            let mut bad = good.clone();
            bad[at] ^= 0xff;
            let _ = read_imports(&bad);
        }
    }
}
