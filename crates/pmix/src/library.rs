//! Finding and loading `libpmix.so.2` at run time.
//!
//! Owns: the library choice (an explicit path, else the program's own Open
//! MPI, else the system loader's `libpmix.so.2`), the `dlopen` handle and
//! the resolved function table [`Api`]. dpm links nothing from OpenPMIx:
//! the library is opened only when a PMIx job asks for it, once per
//! process, and never closed (the server's threads run its code until exit).
use crate::error::PmixError;
use crate::ffi::*;
use std::ffi::CStr;
use std::path::{Path, PathBuf};

/// The library's SONAME (OpenPMIx 2.x through 5.x).
pub const SONAME: &str = "libpmix.so.2";

/// Where to look for `libpmix.so.2`, in order; the first that exists wins.
#[derive(Debug, Clone, Default)]
pub struct LibrarySearch {
    /// An explicit path (a dpm setting); used alone when given.
    pub explicit: Option<PathBuf>,
    /// The program about to be launched: its Open MPI's bundled PMIx is
    /// preferred, so the server matches the clients' own version.
    pub program: Option<PathBuf>,
    /// `$OPAL_PREFIX` of the job's environment.
    pub opal_prefix: Option<PathBuf>,
}

impl LibrarySearch {
    /// Candidate paths in order; the last, a bare SONAME, means "ask the loader".
    pub fn candidates(&self) -> Vec<PathBuf> {
        if let Some(path) = &self.explicit {
            return vec![path.clone()];
        }
        let mut out = Vec::new();
        if let Some(prefix) = &self.opal_prefix {
            out.push(prefix.join("lib/openmpi").join(SONAME));
        }
        if let Some(program) = &self.program {
            out.extend(runpath_dirs(program).into_iter().map(|dir| dir.join("openmpi").join(SONAME)));
            out.extend(install_lib_dir(program).map(|dir| dir.join("openmpi").join(SONAME)));
        }
        out.push(PathBuf::from(SONAME));
        out
    }

    /// The first candidate that is a file (or the bare SONAME).
    pub fn choose(&self) -> PathBuf {
        let candidates = self.candidates();
        for candidate in &candidates {
            if candidate.components().count() == 1 || candidate.is_file() {
                return candidate.clone();
            }
        }
        candidates.last().cloned().unwrap_or_else(|| PathBuf::from(SONAME))
    }
}

/// Directories a program's `libmpi.so.40` would come from, found without
/// running the loader: its RUNPATH/RPATH entries (with `$ORIGIN` expanded)
/// that hold `libmpi.so.40`. Kept simple: the dynamic section is read by
/// scanning the file for the `$ORIGIN`-style strings the wheel's `mpicc`
/// writes, not by an ELF parser; `LD_LIBRARY_PATH` is not consulted.
pub fn runpath_dirs(program: &Path) -> Vec<PathBuf> {
    let Ok(bytes) = std::fs::read(program) else { return Vec::new() };
    let origin = program.parent().unwrap_or(Path::new("."));
    let mut dirs = Vec::new();
    for chunk in bytes.split(|b| *b == 0) {
        let Ok(text) = std::str::from_utf8(chunk) else { continue };
        if !text.starts_with('/') && !text.starts_with("$ORIGIN") {
            continue;
        }
        for entry in text.split(':') {
            let dir = PathBuf::from(entry.replace("$ORIGIN", &origin.to_string_lossy()));
            if dir.join("libmpi.so.40").is_file() && !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

/// The `lib` directory of the Open MPI installation a program sits in:
/// `<dir>/../lib` when it holds `libmpi.so.40`. An interpreter has no
/// RUNPATH naming Open MPI: mpi4py's ranks run `.venv-ompi/bin/python`,
/// whose venv holds the wheel's Open MPI. The path is not canonicalised
/// (a venv's `python` is a symlink to the system's interpreter).
pub fn install_lib_dir(program: &Path) -> Option<PathBuf> {
    let lib = program.parent()?.join("../lib");
    lib.join("libmpi.so.40").is_file().then_some(lib)
}

/// The loaded library: the functions dpm calls.
pub struct Api {
    pub path: PathBuf,
    pub server_init: ServerInitFn,
    pub server_finalize: ServerFinalizeFn,
    pub register_nspace: RegisterNspaceFn,
    pub deregister_nspace: DeregisterNspaceFn,
    pub register_client: RegisterClientFn,
    pub deregister_client: DeregisterClientFn,
    pub setup_fork: SetupForkFn,
    pub dmodex_request: DmodexRequestFn,
    pub generate_regex: GenerateFn,
    pub generate_ppn: GenerateFn,
    pub error_string: ErrorStringFn,
}

impl Api {
    /// Loads `path` and resolves every symbol, or says which is missing.
    pub fn load(path: &Path) -> Result<Api, PmixError> {
        let load = |e: libloading::Error| PmixError::Load { path: path.to_owned(), reason: e.to_string() };
        // SAFETY: RTLD_NOW resolves everything now so a broken library fails
        // here, not in a later call. The library's constructors run
        // (libevent/hwloc init); it is never unloaded (forgotten below).
        let lib = unsafe { libloading::os::unix::Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_GLOBAL) }.map_err(load)?;
        let sym = |name: &CStr| -> Result<*mut libc::c_void, PmixError> {
            // SAFETY: the symbol's address, read as a plain pointer; its type
            // is given where it is transmuted below.
            unsafe { lib.get::<*mut libc::c_void>(name.to_bytes_with_nul()) }.map(|s| *s).map_err(load)
        };
        // SAFETY (every transmute below): each symbol is the exported C
        // function of that name, whose signature the fn type declares as in
        // pmix_server.h / pmix.h v5.0.9; a data pointer and a fn pointer have
        // the same size on the supported (POSIX) targets.
        let api = unsafe {
            Api {
                path: path.to_owned(),
                server_init: std::mem::transmute::<*mut libc::c_void, ServerInitFn>(sym(c"PMIx_server_init")?),
                server_finalize: std::mem::transmute::<*mut libc::c_void, ServerFinalizeFn>(sym(c"PMIx_server_finalize")?),
                register_nspace: std::mem::transmute::<*mut libc::c_void, RegisterNspaceFn>(sym(c"PMIx_server_register_nspace")?),
                deregister_nspace: std::mem::transmute::<*mut libc::c_void, DeregisterNspaceFn>(sym(c"PMIx_server_deregister_nspace")?),
                register_client: std::mem::transmute::<*mut libc::c_void, RegisterClientFn>(sym(c"PMIx_server_register_client")?),
                deregister_client: std::mem::transmute::<*mut libc::c_void, DeregisterClientFn>(sym(c"PMIx_server_deregister_client")?),
                setup_fork: std::mem::transmute::<*mut libc::c_void, SetupForkFn>(sym(c"PMIx_server_setup_fork")?),
                dmodex_request: std::mem::transmute::<*mut libc::c_void, DmodexRequestFn>(sym(c"PMIx_server_dmodex_request")?),
                generate_regex: std::mem::transmute::<*mut libc::c_void, GenerateFn>(sym(c"PMIx_generate_regex")?),
                generate_ppn: std::mem::transmute::<*mut libc::c_void, GenerateFn>(sym(c"PMIx_generate_ppn")?),
                error_string: std::mem::transmute::<*mut libc::c_void, ErrorStringFn>(sym(c"PMIx_Error_string")?),
            }
        };
        std::mem::forget(lib);
        Ok(api)
    }

    /// The library's name for a status ("PMIX_ERR_NOT_FOUND").
    pub fn status_name(&self, status: pmix_status_t) -> String {
        // SAFETY: PMIx_Error_string returns a static string for any value.
        let ptr = unsafe { (self.error_string)(status) };
        if ptr.is_null() {
            return format!("PMIx status {status}");
        }
        // SAFETY: non-null static NUL-terminated string from the library.
        unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_path_is_the_only_candidate() {
        let search = LibrarySearch { explicit: Some("/x/libpmix.so.2".into()), opal_prefix: Some("/p".into()), program: None };
        assert_eq!(search.candidates(), vec![PathBuf::from("/x/libpmix.so.2")]);
    }

    #[test]
    fn opal_prefix_then_loader() {
        let search = LibrarySearch { opal_prefix: Some("/p".into()), ..Default::default() };
        assert_eq!(search.candidates(), vec![PathBuf::from("/p/lib/openmpi/libpmix.so.2"), PathBuf::from(SONAME)]);
        // /p does not exist: the loader's SONAME is chosen.
        assert_eq!(search.choose(), PathBuf::from(SONAME));
    }

    #[test]
    fn a_program_in_an_open_mpi_prefix_gets_its_library() {
        let root = std::env::temp_dir().join(format!("dpm-pmix-prefix-{}", std::process::id()));
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::create_dir_all(root.join("lib/openmpi")).unwrap();
        let python = root.join("bin/python");
        std::fs::write(&python, b"#!/bin/sh\n").unwrap();
        let search = LibrarySearch { program: Some(python.clone()), ..Default::default() };
        // No libmpi.so.40 beside it: only the loader.
        assert_eq!(search.candidates(), vec![PathBuf::from(SONAME)]);
        std::fs::write(root.join("lib/libmpi.so.40"), b"").unwrap();
        std::fs::write(root.join("lib/openmpi").join(SONAME), b"").unwrap();
        let want = root.join("bin/../lib/openmpi").join(SONAME);
        assert_eq!(search.candidates(), vec![want.clone(), PathBuf::from(SONAME)]);
        assert_eq!(search.choose(), want);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn missing_library_is_a_load_error() {
        let err = Api::load(Path::new("/nonexistent/libpmix.so.2")).err().expect("must fail");
        assert!(matches!(err, PmixError::Load { .. }), "{err}");
    }
}
