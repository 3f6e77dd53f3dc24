//! The libraries an ELF program needs (its `DT_NEEDED` entries), read as
//! the dynamic loader finds them: the header, the program headers, the
//! dynamic segment and its string table — a few KiB of the file whatever
//! its size. 32- and 64-bit, either byte order. Every size read from the
//! file is bounded before it is used.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Program headers read, at most (real programs have about a dozen).
const MAX_PHDRS: u64 = 512;
/// Bytes of the dynamic segment read, at most (a few hundred in practice).
const MAX_DYNAMIC: u64 = 64 << 10;
/// Bytes of the dynamic string table read, at most.
const MAX_STRTAB: u64 = 1 << 20;

const PT_LOAD: u64 = 1;
const PT_DYNAMIC: u64 = 2;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;

/// `None` when `path` is not a regular ELF file (or cannot be opened);
/// else the names of the libraries it needs — none for a static program,
/// or one whose dynamic section cannot be read.
pub(super) fn needed(path: &Path) -> Option<Vec<Vec<u8>>> {
    let file = File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut ident = [0u8; 64];
    let got = read_up_to(&file, &mut ident, 0);
    if got < 16 || !ident.starts_with(b"\x7fELF") {
        return None;
    }
    let layout = match (ident[4], ident[5]) {
        (1 | 2, 1 | 2) => Layout { wide: ident[4] == 2, little: ident[5] == 1 },
        _ => return Some(Vec::new()),
    };
    Some(layout.needed(&file, &ident[..got]).unwrap_or_default())
}

/// How one ELF file writes its numbers.
struct Layout {
    /// ELFCLASS64 (else 32).
    wide: bool,
    /// ELFDATA2LSB (else big-endian).
    little: bool,
}

/// A `PT_LOAD` segment: where its bytes sit in memory and in the file.
struct Load {
    vaddr: u64,
    offset: u64,
    size: u64,
}

impl Layout {
    fn int<const N: usize>(&self, bytes: &[u8], at: usize) -> Option<u64> {
        let raw: [u8; N] = bytes.get(at..at.checked_add(N)?)?.try_into().ok()?;
        let mut wide = [0u8; 8];
        if self.little {
            wide[..N].copy_from_slice(&raw);
            Some(u64::from_le_bytes(wide))
        } else {
            wide[8 - N..].copy_from_slice(&raw);
            Some(u64::from_be_bytes(wide))
        }
    }

    fn half(&self, bytes: &[u8], at: usize) -> Option<u64> {
        self.int::<2>(bytes, at)
    }

    fn word(&self, bytes: &[u8], at: usize) -> Option<u64> {
        self.int::<4>(bytes, at)
    }

    /// An address or offset: 8 bytes in a 64-bit file, 4 in a 32-bit one.
    fn addr(&self, bytes: &[u8], at: usize) -> Option<u64> {
        if self.wide {
            self.int::<8>(bytes, at)
        } else {
            self.word(bytes, at)
        }
    }

    fn needed(&self, file: &File, header: &[u8]) -> Option<Vec<Vec<u8>>> {
        let (phoff, phentsize, phnum) = if self.wide {
            (self.addr(header, 0x20)?, self.half(header, 0x36)?, self.half(header, 0x38)?)
        } else {
            (self.word(header, 0x1c)?, self.half(header, 0x2a)?, self.half(header, 0x2c)?)
        };
        if phentsize < if self.wide { 56 } else { 32 } || phnum > MAX_PHDRS {
            return None;
        }
        let phdrs = read_exact(file, phoff, phentsize * phnum)?;
        let mut loads = Vec::new();
        let mut dynamic = None;
        for ph in phdrs.chunks_exact(phentsize as usize) {
            let (offset, vaddr, size) = if self.wide {
                (self.addr(ph, 8)?, self.addr(ph, 16)?, self.addr(ph, 32)?)
            } else {
                (self.word(ph, 4)?, self.word(ph, 8)?, self.word(ph, 16)?)
            };
            match self.word(ph, 0)? {
                PT_LOAD => loads.push(Load { vaddr, offset, size }),
                PT_DYNAMIC => dynamic = Some((offset, size.min(MAX_DYNAMIC))),
                _ => {}
            }
        }
        let (offset, size) = dynamic?;
        let entries = read_exact(file, offset, size)?;
        let entry = if self.wide { 16 } else { 8 };
        let (mut wanted, mut strtab, mut strsz) = (Vec::new(), None, None);
        for e in entries.chunks_exact(entry) {
            let (tag, value) = (self.addr(e, 0)?, self.addr(e, entry / 2)?);
            match tag {
                DT_NULL => break,
                DT_NEEDED => wanted.push(value),
                DT_STRTAB => strtab = Some(value),
                DT_STRSZ => strsz = Some(value),
                _ => {}
            }
        }
        // The string table is named by its address: find it in the file
        // through the loaded segment that holds it.
        let strtab = strtab?;
        let load = loads.iter().find(|l| l.vaddr <= strtab && strtab - l.vaddr < l.size)?;
        let strings = read_exact(file, load.offset.checked_add(strtab - load.vaddr)?, strsz?.min(MAX_STRTAB))?;
        let names = wanted
            .into_iter()
            .filter_map(|at| {
                let rest = strings.get(usize::try_from(at).ok()?..)?;
                let end = rest.iter().position(|&b| b == 0)?;
                Some(rest[..end].to_vec())
            })
            .collect();
        Some(names)
    }
}

/// Fills as much of `buf` as the file has from `offset`; the count read.
fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> usize {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    got
}

/// Exactly `len` bytes at `offset`, or `None` past the end of the file.
fn read_exact(file: &File, offset: u64, len: u64) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; usize::try_from(len).ok()?];
    file.read_exact_at(&mut buf, offset).ok()?;
    Some(buf)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal 64-bit little-endian ELF file needing `libs`: one
    /// `PT_LOAD` over the whole file (addresses = offsets), a `PT_DYNAMIC`.
    pub fn image(libs: &[&[u8]]) -> Vec<u8> {
        let mut strtab = vec![0u8];
        let mut offsets = Vec::new();
        for lib in libs {
            offsets.push(strtab.len() as u64);
            strtab.extend_from_slice(lib);
            strtab.push(0);
        }
        let dyn_off = 64 + 2 * 56;
        let mut dynamic: Vec<(u64, u64)> = offsets.iter().map(|&o| (DT_NEEDED, o)).collect();
        let str_off = (dyn_off + (dynamic.len() + 3) * 16) as u64;
        dynamic.extend([(DT_STRTAB, str_off), (DT_STRSZ, strtab.len() as u64), (DT_NULL, 0)]);
        let total = str_off + strtab.len() as u64;
        let mut f = Vec::new();
        f.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
        f.extend_from_slice(&3u16.to_le_bytes()); // ET_DYN
        f.extend_from_slice(&62u16.to_le_bytes()); // x86-64
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&0u64.to_le_bytes()); // entry
        f.extend_from_slice(&64u64.to_le_bytes()); // phoff
        f.extend_from_slice(&0u64.to_le_bytes()); // shoff
        f.extend_from_slice(&0u32.to_le_bytes());
        for half in [64u16, 56, 2, 64, 0, 0] {
            f.extend_from_slice(&half.to_le_bytes());
        }
        for (kind, offset, size) in [(PT_LOAD, 0, total), (PT_DYNAMIC, dyn_off as u64, (dynamic.len() * 16) as u64)] {
            f.extend_from_slice(&(kind as u32).to_le_bytes());
            f.extend_from_slice(&4u32.to_le_bytes());
            for v in [offset, offset, offset, size, size, 8] {
                f.extend_from_slice(&v.to_le_bytes());
            }
        }
        for (tag, value) in dynamic {
            f.extend_from_slice(&tag.to_le_bytes());
            f.extend_from_slice(&value.to_le_bytes());
        }
        f.extend_from_slice(&strtab);
        f
    }

    fn write(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("dpm-elf-test.{}.{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn the_needed_libraries_of_a_made_file_are_read() {
        let path = write("made", &image(&[b"libmpi.so.40", b"libc.so.6"]));
        assert_eq!(needed(&path), Some(vec![b"libmpi.so.40".to_vec(), b"libc.so.6".to_vec()]));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_real_program_needs_libc_and_a_script_is_not_elf() {
        let libs = needed(Path::new("/bin/sh")).expect("/bin/sh is ELF");
        assert!(libs.iter().any(|l| l.starts_with(b"libc.so")), "{libs:?}");
        let script = write("script", b"#!/bin/sh\nexit 0\n");
        assert_eq!(needed(&script), None);
        std::fs::remove_file(script).unwrap();
        assert_eq!(needed(Path::new("/")), None, "a directory is no program");
    }

    #[test]
    fn a_damaged_file_is_elf_needing_nothing() {
        let whole = image(&[b"libmpi.so.40"]);
        // Every truncation and a corrupted size field: no panic, no libraries
        // beyond what could be read.
        for len in [16, 63, 64, 100, 176, 200, whole.len() - 1] {
            let path = write("cut", &whole[..len]);
            assert_eq!(needed(&path), Some(Vec::new()), "cut at {len}");
            std::fs::remove_file(path).unwrap();
        }
        let mut huge = whole.clone();
        huge[0x38] = 0xff; // phnum 0x..ff, far beyond the file
        huge[0x39] = 0xff;
        let path = write("huge", &huge);
        assert_eq!(needed(&path), Some(Vec::new()));
        std::fs::remove_file(path).unwrap();
    }
}
