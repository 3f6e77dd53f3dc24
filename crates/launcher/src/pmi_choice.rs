//! `--pmi simple|pmix|auto` (else `DPM_PMI`, else auto): which PMI front end
//! the daemons serve a run's jobs with. One flavour per job, never both:
//! MPICH aborts when `PMI_SIZE` and `PMIX_NAMESPACE` are both set
//! (mpich#7957), and an Open MPI 5 program under PMI-1/2 runs as N unrelated
//! singletons that exit 0. So `auto` picks PMIx for a program that links
//! Open MPI 5 (`libmpi.so.40` among its strings), and `simple` refuses such a
//! program with a message saying what to do. A script (mpi4py) cannot be
//! recognised: it gets `simple` under `auto` (say `--pmi pmix`).

use std::io::Read;
use std::path::Path;
use std::str::FromStr;

use dpm_kvs::KvsDesign;
use dpm_proto::{AppSpec, PmiMode};

use crate::error::UsageError;
use crate::plan::PlanError;

/// The `--pmi` setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PmiFlavour {
    /// PMI-1/PMI-2 (MPICH, Intel MPI, MVAPICH, dpm's libraries).
    Simple,
    /// PMIx (Open MPI 5).
    Pmix,
    /// PMIx when every program links Open MPI 5, else simple.
    #[default]
    Auto,
}

impl FromStr for PmiFlavour {
    type Err = UsageError;
    fn from_str(s: &str) -> Result<Self, UsageError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "simple" | "pmi" | "pmi1" | "pmi2" => Ok(PmiFlavour::Simple),
            "pmix" => Ok(PmiFlavour::Pmix),
            "auto" => Ok(PmiFlavour::Auto),
            other => Err(UsageError(format!("unknown PMI flavour '{other}' (simple, pmix or auto)"))),
        }
    }
}

/// The SONAME of Open MPI 4 and 5's `libmpi`; Open MPI 5 speaks only PMIx.
const OPEN_MPI_SONAME: &[u8] = b"libmpi.so.40\0";
/// How much of a program is read to find its needed libraries: the dynamic
/// string table sits near the start of an ELF file.
const SCAN_BYTES: u64 = 16 << 20;

/// Whether `program` is an ELF file that names `libmpi.so.40` (its
/// `DT_NEEDED`). Not an ELF parser: the string table is searched as bytes.
pub fn links_open_mpi(program: &Path) -> bool {
    let Ok(file) = std::fs::File::open(program) else { return false };
    let mut bytes = Vec::new();
    if file.take(SCAN_BYTES).read_to_end(&mut bytes).is_err() || !bytes.starts_with(b"\x7fELF") {
        return false;
    }
    bytes.windows(OPEN_MPI_SONAME.len()).any(|w| w == OPEN_MPI_SONAME)
}

/// How a job of `apps` reaches its PMI server, and its KVS design: PMIx
/// jobs exchange each node's blob at the fence (allgather).
pub fn choose(flavour: PmiFlavour, port: bool, kvs: KvsDesign, apps: &[AppSpec]) -> Result<(PmiMode, KvsDesign), PlanError> {
    let simple = if port { PmiMode::Port } else { PmiMode::Fd };
    let open_mpi: Vec<&AppSpec> = apps.iter().filter(|a| links_open_mpi(Path::new(&a.exe))).collect();
    let pmix = match flavour {
        PmiFlavour::Pmix => true,
        PmiFlavour::Auto => !open_mpi.is_empty(),
        PmiFlavour::Simple => {
            if let Some(app) = open_mpi.first() {
                return Err(PlanError::Invalid(format!(
                    "{}: links Open MPI (libmpi.so.40), which needs PMIx; its ranks would each run alone. Use --pmi pmix or --pmi auto (or DPM_PMI=auto)",
                    app.exe
                )));
            }
            false
        }
    };
    if !pmix {
        return Ok((simple, kvs));
    }
    if port {
        return Err(PlanError::Invalid("--pmi-port serves PMI-1/PMI-2 only; a PMIx job's ranks reach their node's PMIx server".into()));
    }
    if open_mpi.len() < apps.len() && flavour == PmiFlavour::Auto {
        let other = apps.iter().find(|a| !links_open_mpi(Path::new(&a.exe))).map_or("?", |a| a.exe.as_str());
        tracing::warn!("{other}: does not link Open MPI; served with PMIx as the job's other programs (--pmi simple to refuse)");
    }
    Ok((PmiMode::Pmix, KvsDesign::Allgather))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(exe: &str) -> AppSpec {
        AppSpec { exe: exe.into(), argv: vec![exe.into()], env: vec![], wdir: "/".into() }
    }

    fn elf_naming(dir: &Path, name: &str, soname: &[u8]) -> String {
        let path = dir.join(name);
        let mut bytes = b"\x7fELF\x02\x01\x01\0".to_vec();
        bytes.extend_from_slice(b"\0libc.so.6\0");
        bytes.extend_from_slice(soname);
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    }

    #[test]
    fn flavours_parse_and_unknown_ones_are_refused() {
        assert_eq!("PMIx".parse::<PmiFlavour>().unwrap(), PmiFlavour::Pmix);
        assert_eq!("simple".parse::<PmiFlavour>().unwrap(), PmiFlavour::Simple);
        assert_eq!("auto".parse::<PmiFlavour>().unwrap(), PmiFlavour::Auto);
        assert!("pmi3".parse::<PmiFlavour>().unwrap_err().0.contains("simple, pmix or auto"));
    }

    #[test]
    fn auto_recognises_open_mpi_and_simple_refuses_it() {
        let dir = std::env::temp_dir().join(format!("dpm-pmi-choice-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ompi = elf_naming(&dir, "ompi", b"libmpi.so.40\0");
        let mpich = elf_naming(&dir, "mpich", b"libmpi.so.12\0");
        let script = dir.join("script");
        std::fs::write(&script, b"#!/bin/sh\n# libmpi.so.40\0\n").unwrap();
        assert!(links_open_mpi(Path::new(&ompi)));
        assert!(!links_open_mpi(Path::new(&mpich)));
        assert!(!links_open_mpi(&script), "only ELF files are recognised");
        assert!(!links_open_mpi(&dir.join("missing")));

        let auto = |exe: &str| choose(PmiFlavour::Auto, false, KvsDesign::Auto, &[app(exe)]).unwrap();
        assert_eq!(auto(&ompi), (PmiMode::Pmix, KvsDesign::Allgather));
        assert_eq!(auto(&mpich), (PmiMode::Fd, KvsDesign::Auto));
        assert_eq!(choose(PmiFlavour::Auto, true, KvsDesign::Tree, &[app(&mpich)]).unwrap(), (PmiMode::Port, KvsDesign::Tree));
        assert_eq!(choose(PmiFlavour::Pmix, false, KvsDesign::Auto, &[app(&mpich)]).unwrap().0, PmiMode::Pmix);
        let refused = choose(PmiFlavour::Simple, false, KvsDesign::Auto, &[app(&mpich), app(&ompi)]).unwrap_err();
        assert!(refused.to_string().contains("needs PMIx") && refused.to_string().contains("--pmi pmix"), "{refused}");
        assert!(choose(PmiFlavour::Pmix, true, KvsDesign::Auto, &[app(&ompi)]).is_err(), "no PMI port under PMIx");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
