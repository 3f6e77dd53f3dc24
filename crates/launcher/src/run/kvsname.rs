//! Job names: the kvsname MPICH sees and the PMIx namespace Open MPI sees.
//!
//! Open MPI turns a namespace into its 32-bit job id
//! (`opal_pmix_convert_nspace`): the string before an `@` is hashed
//! (`OPAL_HASH_STR`, Jenkins' one-at-a-time) and folded to 16 bits, the
//! number after the `@` is the low 16; a name without `@` — dpm's — is
//! `[family, 0]`. Two live jobs of one run with the same 16-bit family are
//! one job to Open MPI, which then takes a new child for an exited one of
//! the same rank: `connect() … failed: Connection refused`,
//! `MPI_ERR_UNKNOWN`, abort — about one run in 16 of mpi4py's `test_spawn`
//! (~100 spawns), never under prterun. So a name whose family a live job of
//! the tree already has is drawn again. (PRRTE's own form, `…@<job + 1>`,
//! was tried: Open MPI then treats the jobs as one family launched by PRRTE,
//! and spawned children failed with "invalid communicator".)
//!
//! A name carries 128 random bits (drawn per daemon tree: a run, or a
//! boot). The namespace is what a PMIx client names itself by, so it is
//! kept out of every world-visible name (`/dev/shm`, directories, process
//! titles): what a node shows of a job there is the rest, dpm's pid and the
//! job number (`dpm_daemon`'s PMIx host, `public_part`).

use dpm_kvs::JobId;

/// How many of the last names handed out count as live before their job
/// is registered (spawns in flight at once are far fewer).
pub const ISSUED_REMEMBERED: usize = 256;

/// Draws before giving up on a free family (only with ~65,536 live jobs).
const DRAWS: u32 = 1024;

/// A job's plain kvsname: `kvs_<dpm pid>_<128 random bits in hex>_<job>`.
/// MPICH names its node shared-memory segment after a hash of it
/// (`/dev/shm/mpich_shm_<hash>_<node>`), and a killed run leaves that file
/// behind: with the pid alone a later run that reuses the pid collides with
/// it and fails in MPI_Init ("Out of memory").
pub fn kvsname(secret: u128, job: JobId) -> String {
    format!("kvs_{}_{:032x}_{}", std::process::id(), secret, job.0)
}

/// `job`'s kvsname, redrawn (`…_<job>.<n>`) while `taken` says a live job
/// already has its Open MPI family.
pub fn fresh(secret: u128, job: JobId, taken: impl Fn(u16) -> bool) -> String {
    let plain = kvsname(secret, job);
    (0..DRAWS).map(|n| if n == 0 { plain.clone() } else { format!("{plain}.{n}") }).find(|name| !taken(open_mpi_family(name))).unwrap_or(plain)
}

/// The 16-bit job family Open MPI derives from a namespace without `@`:
/// `OPAL_HASH_STR` (one-at-a-time), its halves XORed. Checked against Open
/// MPI 5.0.11: `kvs_5330_981e6345_0` is `[[38319,0],0]` in its messages.
pub fn open_mpi_family(nspace: &str) -> u16 {
    let base = nspace.rsplit_once('@').map_or(nspace, |(b, _)| b);
    let mut h: u32 = 0;
    for &c in base.as_bytes() {
        // OPAL_HASH_STR adds `char`s: signed on x86-64, as `c as i8` widened.
        h = h.wrapping_add(c as i8 as i32 as u32);
        h = h.wrapping_add(h << 10);
        h ^= h >> 6;
    }
    h = h.wrapping_add(h << 3);
    h ^= h >> 11;
    h = h.wrapping_add(h << 15);
    ((h >> 16) ^ (h & 0xffff)) as u16
}

/// The job family of the Open MPI process a rendezvous name belongs to:
/// Open MPI's connect/accept publishes and waits for names
/// `<jobid>.<vpid>:<tag>` (`2689990656.0:1082420386:accept`), the job id
/// being a family over a 0 local id. `None` for any other name.
pub fn open_mpi_port_family(service: &str) -> Option<u16> {
    let (proc_name, _) = service.split_once(':')?;
    let (jobid, vpid) = proc_name.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(jobid) || !digits(vpid) {
        return None;
    }
    let jobid: u32 = jobid.parse().ok()?;
    vpid.parse::<u32>().ok()?;
    (jobid & 0xffff == 0).then_some((jobid >> 16) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_family_is_open_mpis() {
        // Read from Open MPI's own MPI_Abort message under dpm.
        assert_eq!(open_mpi_family("kvs_5330_981e6345_0"), 38319);
        assert_eq!(open_mpi_family("kvs_5330_981e6345@7"), open_mpi_family("kvs_5330_981e6345"));
    }

    #[test]
    fn a_rendezvous_name_names_its_family() {
        // Seen under dpm: the accepting process of family 0xa056.
        assert_eq!(open_mpi_port_family("2689990656.0:1082420386:accept"), Some(0xa056));
        assert_eq!(open_mpi_port_family("45809664.3:853975976:nextcid:send:0"), Some((45809664_u32 >> 16) as u16));
        for other in ["svc", "my.service:x", "12.0", "2689990657.0:1:accept", ".0:x", "1.:x", "99999999999.0:x", "+1.0:x"] {
            assert_eq!(open_mpi_port_family(other), None, "{other}");
        }
    }

    #[test]
    fn a_taken_family_is_drawn_again() {
        let plain = kvsname(1, JobId(3));
        let first = open_mpi_family(&plain);
        let name = fresh(1, JobId(3), |f| f == first);
        assert!(name.starts_with(&plain) && name != plain, "{name}");
        assert_ne!(open_mpi_family(&name), first);
        assert_eq!(fresh(1, JobId(3), |_| false), plain, "the plain name when free");
    }

    #[test]
    fn a_name_ends_in_128_random_bits() {
        let secret = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210_u128;
        let name = kvsname(secret, JobId(7));
        assert_eq!(name, format!("kvs_{}_0123456789abcdeffedcba9876543210_7", std::process::id()));
    }
}
