//! Which MPI a command line runs, found before it starts, for `--pmi auto`
//! and `--pmi simple`'s refusal ([`crate::pmi_choice`]).
//!
//! Owns: following a command to the program that links MPI — the program
//! itself (an ELF file needing `libmpi.so.40` — a `DT_NEEDED` entry,
//! read by `mpi_probe::elf` — is Open MPI 5, one needing another MPI library is not),
//! through wrappers (`env ./hello`, `time`, `sh -c "exec ./hello"`: every
//! argument that names a file, and the words of an argument that is shell
//! text), scripts (the `#!` interpreter, and
//! the words of a script's text: `exec ./hello "$@"`), and Python (the
//! `mpi4py` its `sys.path` would import, and the libmpi that mpi4py loads).
//! Reads only: files are opened, never run. Bounded: at most
//! [`MAX_FILES`] files, [`MAX_DEPTH`] levels, [`MAX_WORDS`] words a text.
//! What it cannot see (a program named by a variable, a script that builds
//! its command) is `Unknown`.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use dpm_proto::AppSpec;

pub(crate) mod elf;

/// What a command runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mpi {
    /// Open MPI 5 (PMIx only): the ELF file that links `libmpi.so.40` (the
    /// program, or the mpi4py extension module a Python script imports).
    OpenMpi(PathBuf),
    /// Another MPI (MPICH, Intel MPI, MVAPICH, dpm's PMI libraries).
    Other,
    /// No MPI program was found.
    Unknown,
}

/// The SONAME of Open MPI 4 and 5's `libmpi`; Open MPI 5 speaks only PMIx.
const OPEN_MPI_SONAME: &[u8] = b"libmpi.so.40";
/// How other MPI libraries' names start (checked after Open MPI's, whose
/// SONAME also starts with `libmpi.so.`).
const OTHER_MPI_NAMES: [&[u8]; 5] = [b"libmpi.so.", b"libmpi_abi.so", b"libmpich", b"libpmi.so", b"libpmi2.so"];
/// How much of a script (or an argument's file) is read for words.
const TEXT_BYTES: u64 = 64 << 10;
/// Files examined for one command, at most.
pub const MAX_FILES: usize = 64;
/// Wrappers within wrappers followed, at most.
pub const MAX_DEPTH: usize = 4;
/// Words of one text tried as programs, at most.
pub const MAX_WORDS: usize = 256;

/// Which MPI `app` runs.
pub fn probe(app: &AppSpec) -> Mpi {
    let mut probe = Probe { app, seen: HashSet::new() };
    let args: Vec<&str> = app.argv.iter().skip(1).map(String::as_str).collect();
    probe.command(Path::new(&app.exe), &args, 0)
}

/// Whether `program` is an ELF file that names `libmpi.so.40`.
pub fn links_open_mpi(program: &Path) -> bool {
    matches!(elf_mpi(program), Some(Mpi::OpenMpi(_)))
}

/// For an ELF file: which MPI it links (`Unknown` for none); `None` when
/// it is not an ELF file (or cannot be read).
fn elf_mpi(file: &Path) -> Option<Mpi> {
    let needed = elf::needed(file)?;
    let needs = |wanted: &dyn Fn(&[u8]) -> bool| needed.iter().any(|lib| wanted(lib));
    Some(if needs(&|lib| lib == OPEN_MPI_SONAME) {
        Mpi::OpenMpi(file.to_path_buf())
    } else if needs(&|lib| OTHER_MPI_NAMES.iter().any(|name| lib.starts_with(name))) {
        Mpi::Other
    } else {
        Mpi::Unknown
    })
}

fn head(file: &Path, limit: u64) -> Option<Vec<u8>> {
    let file = std::fs::File::open(file).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

struct Probe<'a> {
    app: &'a AppSpec,
    /// Files examined (never twice: a script names itself in its argv).
    seen: HashSet<PathBuf>,
}

impl Probe<'_> {
    fn env(&self, name: &str) -> Option<&str> {
        self.app.env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The file `word` names as `execvp` would find it from the job's
    /// working directory (a bare name through `PATH`), if it is a file.
    fn resolve(&self, word: &str) -> Option<PathBuf> {
        if word.is_empty() || word.len() > 4096 || word.contains('\0') {
            return None;
        }
        let wdir = Path::new(&self.app.wdir);
        if word.contains('/') {
            let path = wdir.join(word);
            return path.is_file().then_some(path);
        }
        if !word.bytes().all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b)) || word.starts_with('-') {
            return None;
        }
        let path = self.env("PATH").unwrap_or("/usr/local/bin:/usr/bin:/bin");
        path.split(':').map(|dir| wdir.join(if dir.is_empty() { "." } else { dir }).join(word)).find(|p| p.is_file())
    }

    /// Marks `file` examined; false when it was, or the budget is spent.
    fn visit(&mut self, file: &Path) -> bool {
        self.seen.len() < MAX_FILES && self.seen.insert(file.to_path_buf())
    }

    /// `exe` started with `args`.
    fn command(&mut self, exe: &Path, args: &[&str], depth: usize) -> Mpi {
        if depth > MAX_DEPTH || !self.visit(exe) {
            return Mpi::Unknown;
        }
        match elf_mpi(exe) {
            Some(Mpi::Unknown) if is_python(exe) => match self.python(exe) {
                Mpi::Unknown => self.words(args.iter().copied(), depth),
                found => found,
            },
            Some(Mpi::Unknown) => self.words(args.iter().copied(), depth),
            Some(found) => found,
            None => self.script(exe, args, depth),
        }
    }

    /// A file that is not ELF: its `#!` interpreter, then the words of its text.
    fn script(&mut self, file: &Path, args: &[&str], depth: usize) -> Mpi {
        let Some(text) = head(file, TEXT_BYTES) else { return Mpi::Unknown };
        if text.contains(&0) {
            return Mpi::Unknown;
        }
        let text = String::from_utf8_lossy(&text);
        if let Some(line) = text.lines().next().and_then(|l| l.strip_prefix("#!")) {
            let mut parts = line.split_whitespace();
            if let Some(interpreter) = parts.next() {
                // The kernel passes the rest of the line as one argument.
                let rest = parts.collect::<Vec<_>>().join(" ");
                let script = file.display().to_string();
                let mut argv: Vec<&str> = Vec::new();
                if !rest.is_empty() {
                    argv.push(&rest);
                }
                argv.push(&script);
                argv.extend(args);
                let found = self.command(Path::new(interpreter), &argv, depth + 1);
                if found != Mpi::Unknown {
                    return found;
                }
            }
        }
        self.words(shell_words(&text), depth)
    }

    /// The first of `words` (an argv, a text's words) that names a program
    /// running an MPI, or shell text whose words do.
    fn words<'w>(&mut self, words: impl Iterator<Item = &'w str>, depth: usize) -> Mpi {
        for word in words.take(MAX_WORDS) {
            let found = match self.resolve(word) {
                Some(file) => self.command(&file, &[], depth + 1),
                None if word.contains(char::is_whitespace) => self.words(shell_words(word), depth + 1),
                None => Mpi::Unknown,
            };
            if found != Mpi::Unknown {
                return found;
            }
        }
        Mpi::Unknown
    }

    /// A Python interpreter: the `mpi4py` it would import, and its MPI.
    fn python(&mut self, exe: &Path) -> Mpi {
        let Some(package) = self.mpi4py_of(exe) else { return Mpi::Unknown };
        let modules: Vec<PathBuf> = std::fs::read_dir(&package)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("MPI.") && n.ends_with(".so")))
            .collect();
        match modules.as_slice() {
            [] => Mpi::Unknown,
            [one] => elf_mpi(one).unwrap_or(Mpi::Unknown),
            // mpi4py's binary wheel: one module per MPI ABI, chosen at import.
            // The library the wheel loads is named, when known: its RUNPATH
            // leads to the installation's libpmix (the module has none).
            several => match self.wheel_abi(exe) {
                Some((true, lib)) => several
                    .iter()
                    .find(|m| m.file_name().is_some_and(|n| n.to_string_lossy().starts_with("MPI.openmpi.")))
                    .map_or(Mpi::Unknown, |m| Mpi::OpenMpi(lib.unwrap_or_else(|| m.clone()))),
                Some((false, _)) => Mpi::Other,
                None => Mpi::Unknown,
            },
        }
    }

    /// The `mpi4py` package directory `python` would import: `PYTHONPATH`
    /// first, then the site-packages of its venv (the directory above
    /// `bin` holding `pyvenv.cfg`), then its base installation's.
    fn mpi4py_of(&self, python: &Path) -> Option<PathBuf> {
        let mut dirs: Vec<PathBuf> = self.env("PYTHONPATH").into_iter().flat_map(|p| p.split(':')).filter(|d| !d.is_empty()).map(PathBuf::from).collect();
        for prefix in python_prefixes(python) {
            dirs.extend(site_packages(&prefix));
        }
        dirs.into_iter().map(|d| Path::new(&self.app.wdir).join(d).join("mpi4py")).find(|p| p.join("__init__.py").is_file())
    }

    /// Which libmpi mpi4py's wheel would load, as its `_mpiabi` decides:
    /// `MPI4PY_MPIABI`, else the first ELF `libmpi.so`, `.so.12`, `.so.40` in
    /// `MPI4PY_LIBMPI`'s entries, or the interpreter's prefixes' `lib` and
    /// `LD_LIBRARY_PATH`. `(true, the library if found)` for Open MPI.
    fn wheel_abi(&self, python: &Path) -> Option<(bool, Option<PathBuf>)> {
        if let Some(abi) = self.env("MPI4PY_MPIABI") {
            return Some((abi.to_ascii_lowercase().replace(['-', '_', ' '], "") == "openmpi", None));
        }
        let dirs: Vec<PathBuf> = match self.env("MPI4PY_LIBMPI") {
            Some(list) => list.split(':').map(PathBuf::from).collect(),
            None => python_prefixes(python)
                .into_iter()
                .filter(|p| p != Path::new("/usr"))
                .map(|p| p.join("lib"))
                .chain(self.env("LD_LIBRARY_PATH").into_iter().flat_map(|p| p.split(':')).map(PathBuf::from))
                .collect(),
        };
        for entry in dirs {
            let files = if entry.is_dir() { ["libmpi.so", "libmpi.so.12", "libmpi.so.40"].map(|n| entry.join(n)).to_vec() } else { vec![entry] };
            // As dlopen does: a file that is no ELF object (Open MPI's
            // `libmpi.so` is a linker script naming `libmpi.so.40`) is skipped.
            if let Some(lib) = files.into_iter().find(|f| is_elf(f)) {
                let real = std::fs::canonicalize(&lib).unwrap_or(lib);
                let open_mpi = real.file_name().is_some_and(|n| n.to_string_lossy().contains(".so.40"));
                return Some((open_mpi, Some(real)));
            }
        }
        None
    }
}

/// Whether `path` is a file that starts like an ELF object.
fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"\x7fELF"
}

fn is_python(exe: &Path) -> bool {
    exe.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python"))
}

/// The installation prefixes a Python interpreter reads packages from: its
/// venv (`pyvenv.cfg` above `bin`; the interpreter path is not resolved,
/// a venv's python is a link), and the base installation it links to
/// (skipped when the venv excludes the system's site-packages).
fn python_prefixes(python: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let venv = python.parent().and_then(Path::parent).map(Path::to_path_buf);
    let mut system = true;
    if let Some(venv) = venv.filter(|v| v.join("pyvenv.cfg").is_file()) {
        let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).unwrap_or_default();
        system = cfg.lines().any(|l| l.split_once('=').is_some_and(|(k, v)| k.trim() == "include-system-site-packages" && v.trim() == "true"));
        out.push(venv);
    }
    if system {
        let real = std::fs::canonicalize(python).unwrap_or_else(|_| python.to_path_buf());
        out.extend(real.parent().and_then(Path::parent).map(Path::to_path_buf));
    }
    out
}

/// `PREFIX/lib/python3.*/site-packages` (and Debian's `dist-packages`).
fn site_packages(prefix: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(prefix.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
        .flat_map(|e| [e.path().join("site-packages"), e.path().join("dist-packages")])
        .filter(|d| d.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// The words of shell text that could name a program: split at blanks,
/// quotes and shell operators; `VAR=value` gives its value.
fn shell_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || "\"'`;&|()<>{}$".contains(c))
        .map(|w| w.rsplit_once('=').map_or(w, |(_, v)| v))
        .filter(|w| !w.is_empty() && !w.starts_with('-') && !w.starts_with('#'))
}

#[cfg(test)]
#[path = "mpi_probe_tests.rs"]
mod tests;
