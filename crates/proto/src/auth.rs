//! Link authentication: a per-run secret and a mutual challenge-response
//! right after the [`Hello`](crate::frame::Hello)s.
//!
//! The launcher generates a random 32-byte [`Secret`] for each run (a
//! persistent boot will keep one per boot) and hands it to every daemon out of
//! band, **never on a command line** (`/proc/PID/cmdline` is world-readable):
//! - a forked daemon finds it in its environment ([`SECRET_ENV`]);
//! - a daemon started through ssh or srun reads it as the first frame on its
//!   stdin, before the Hello (ssh forwards no environment by default);
//! - a daemon started by hand (`dpm daemon --connect`) reads the private file
//!   named by [`SECRET_FILE_ENV`], or [`SECRET_ENV`];
//! - a daemon passes the same secret on to the children it starts, the same ways.
//!
//! A daemon takes the variables out of its environment at startup (and wipes
//! the value in place, so `/proc/PID/environ` no longer shows it), and ranks
//! never inherit them ([`is_secret_var`]).
//!
//! ## The exchange
//!
//! After both Hellos, each side, at once:
//! 1. sends a fresh random 32-byte nonce (`Challenge`);
//! 2. on the peer's nonce, sends its proof (`Proof`):
//!    `HMAC-SHA256(secret, LABEL ‖ role ‖ node ‖ launcher nonce ‖ daemon nonce)`,
//!    `role` being its own;
//! 3. checks the peer's proof in constant time ([`Mac::verify_slice`]) and
//!    says whether it accepts it (`Verdict`), then reads the peer's verdict.
//!
//! A proof is bound to both nonces (one recorded on another link is useless),
//! to the prover's role (a launcher's proof cannot be reflected back as a
//! daemon's), and to the node number the daemon claimed in its Hello. Both
//! sides must pass: a daemon does not serve a launcher that cannot prove the
//! secret either.
//!
//! Not done: the frames after the handshake are neither encrypted nor
//! integrity-protected. Authentication keeps strangers (another user's stray
//! client, a daemon of another run) off the links; links that cross an
//! untrusted network still need one that is (ssh, a VPN).

use dpm_kvs::NodeId;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::frame::{read_handshake_frame, write_handshake_frame, FrameError, Role};

/// The environment variable that carries the secret (hex) to a forked daemon.
pub const SECRET_ENV: &str = "DPM_SECRET";
/// The environment variable naming a file that holds the secret (hex).
pub const SECRET_FILE_ENV: &str = "DPM_SECRET_FILE";

/// Bytes of a secret, a nonce and a proof.
pub const SECRET_LEN: usize = 32;
pub type Nonce = [u8; SECRET_LEN];

/// Domain separation: these MACs are link proofs of this protocol version.
const LABEL: &[u8] = b"dpm link authentication v1\0";

/// How long the refusing side waits for the peer's verdict before closing.
const VERDICT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a variable carries a link secret; such variables are never passed
/// on to ranks.
pub fn is_secret_var(name: &str) -> bool {
    name == SECRET_ENV || name == SECRET_FILE_ENV
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot get random bytes from the system: {0}")]
    Random(getrandom::Error),
    #[error("{0}: not a dpm secret (expected 64 hex digits)")]
    Malformed(String),
    #[error("secret file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("secret file {path} {why}: it must be a regular file of yours that only you can read (chmod 600)")]
    Unsafe { path: String, why: String },
}

/// The key every link of a run (or boot) proves knowledge of.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; SECRET_LEN]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        wipe(&mut self.0);
    }
}

impl Secret {
    /// A fresh random secret.
    pub fn generate() -> Result<Secret, SecretError> {
        Ok(Secret(random()?))
    }

    pub fn from_bytes(bytes: [u8; SECRET_LEN]) -> Secret {
        Secret(bytes)
    }

    /// Parse 64 hex digits (surrounding whitespace allowed: a file's newline).
    pub fn from_hex(text: &str) -> Result<Secret, SecretError> {
        decode_hex(text.trim()).map(Secret).ok_or_else(|| SecretError::Malformed("the secret".into()))
    }

    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// Read a secret file: it must be a regular file owned by this user and
    /// not accessible to group or others (the file's own checks, on the open
    /// descriptor, so a swapped path cannot fool them).
    pub fn read_file(path: &std::path::Path) -> Result<Secret, SecretError> {
        use std::io::Read;
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let shown = path.display().to_string();
        let io = |source| SecretError::Read { path: shown.clone(), source };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        let unsafe_file = |why: String| SecretError::Unsafe { path: shown.clone(), why };
        if !meta.is_file() {
            return Err(unsafe_file("is not a regular file".into()));
        }
        let me = nix::unistd::geteuid().as_raw();
        if meta.uid() != me {
            return Err(unsafe_file(format!("belongs to uid {}, not to you (uid {me})", meta.uid())));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(unsafe_file(format!("has mode {mode:03o}")));
        }
        let mut text = String::new();
        file.by_ref().take(4096).read_to_string(&mut text).map_err(io)?;
        let secret = decode_hex(text.trim()).map(Secret).ok_or(SecretError::Malformed(shown.clone()));
        wipe_string(&mut text);
        secret
    }

    /// The secret handed to this process: [`SECRET_ENV`] (hex), else the file
    /// named by [`SECRET_FILE_ENV`]. Both variables are removed from the
    /// environment whatever the outcome, and a secret's value is overwritten
    /// where the kernel shows the initial environment (`/proc/PID/environ`).
    ///
    /// Call it first thing in `main`, before any thread starts: changing the
    /// environment is not thread-safe.
    pub fn take_from_env() -> Result<Option<Secret>, SecretError> {
        let inline = std::env::var(SECRET_ENV).ok();
        let file = std::env::var_os(SECRET_FILE_ENV);
        scrub_env();
        if let Some(mut hex) = inline {
            let secret = decode_hex(hex.trim()).map(Secret).ok_or_else(|| SecretError::Malformed(format!("${SECRET_ENV}")));
            wipe_string(&mut hex);
            return secret.map(Some);
        }
        match file {
            Some(path) => Secret::read_file(std::path::Path::new(&path)).map(Some),
            None => Ok(None),
        }
    }
}

/// Remove [`SECRET_ENV`] and [`SECRET_FILE_ENV`] from this process's
/// environment, first overwriting the secret's value in place (the kernel's
/// copy of the initial environment, shown in `/proc/PID/environ`, is that
/// memory). Only sound before any other thread runs.
pub fn scrub_env() {
    let name = std::ffi::CString::new(SECRET_ENV).expect("no NUL in the name");
    // SAFETY: single-threaded (documented precondition), so nothing else
    // reads or changes the environment meanwhile; getenv returns a pointer to
    // the value's NUL-terminated bytes inside the environment block, which is
    // writable memory of this process, and we write only within its length.
    unsafe {
        let value = libc::getenv(name.as_ptr());
        if !value.is_null() {
            let len = libc::strlen(value);
            for i in 0..len {
                std::ptr::write_volatile(value.add(i), b'0' as libc::c_char);
            }
        }
    }
    std::env::remove_var(SECRET_ENV);
    std::env::remove_var(SECRET_FILE_ENV);
}

/// The proof that `role`'s side knows `secret`, for the link of `node` whose
/// launcher and daemon chose these nonces.
pub fn proof(secret: &Secret, role: Role, node: NodeId, launcher_nonce: &Nonce, daemon_nonce: &Nonce) -> [u8; SECRET_LEN] {
    mac(secret, role, node, launcher_nonce, daemon_nonce).finalize().into_bytes().into()
}

/// Check `claimed` against the proof `role`'s side should have made, in
/// constant time.
pub fn verify(secret: &Secret, role: Role, node: NodeId, launcher_nonce: &Nonce, daemon_nonce: &Nonce, claimed: &[u8]) -> bool {
    mac(secret, role, node, launcher_nonce, daemon_nonce).verify_slice(claimed).is_ok()
}

fn mac(secret: &Secret, role: Role, node: NodeId, launcher_nonce: &Nonce, daemon_nonce: &Nonce) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&secret.0).expect("HMAC takes keys of any length");
    m.update(LABEL);
    m.update(match role {
        Role::Launcher => b"L",
        Role::Daemon => b"D",
    });
    m.update(&(node.0 as u64).to_be_bytes());
    m.update(launcher_nonce);
    m.update(daemon_nonce);
    m
}

/// The authentication frames, in the order they are sent.
#[derive(Debug, Serialize, Deserialize)]
enum AuthFrame {
    Challenge { nonce: String },
    Proof { mac: String },
    Verdict { accepted: bool },
}

/// Run the exchange on a link whose Hellos are done: `me` is this side's
/// role, `node` the daemon's node number from its Hello. `Ok` only when both
/// sides proved the secret.
pub async fn authenticate<R, W>(r: &mut R, w: &mut W, secret: &Secret, me: Role, node: NodeId) -> Result<(), FrameError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let peer = match me {
        Role::Launcher => Role::Daemon,
        Role::Daemon => Role::Launcher,
    };
    let ours: Nonce = random().map_err(|e| FrameError::Io(std::io::Error::other(e.to_string())))?;
    write_handshake_frame(w, &AuthFrame::Challenge { nonce: hex(&ours) }).await?;
    let theirs = match read_handshake_frame(r).await? {
        AuthFrame::Challenge { nonce } => decode_hex(&nonce).ok_or(FrameError::Unexpected("a 32-byte nonce"))?,
        _ => return Err(FrameError::Unexpected("a challenge")),
    };
    let (launcher_nonce, daemon_nonce) = match me {
        Role::Launcher => (ours, theirs),
        Role::Daemon => (theirs, ours),
    };
    let mine = proof(secret, me, node, &launcher_nonce, &daemon_nonce);
    write_handshake_frame(w, &AuthFrame::Proof { mac: hex(&mine) }).await?;
    let claimed = match read_handshake_frame(r).await? {
        AuthFrame::Proof { mac } => mac,
        _ => return Err(FrameError::Unexpected("a proof")),
    };
    let accepted = decode_hex::<SECRET_LEN>(&claimed).is_some_and(|claimed| verify(secret, peer, node, &launcher_nonce, &daemon_nonce, &claimed));
    // Our verdict goes out even if the peer has gone (its verdict may still
    // be waiting to be read); then theirs.
    let sent = write_handshake_frame(w, &AuthFrame::Verdict { accepted }).await;
    if !accepted {
        // Read the peer's verdict before closing, so our refusal is not lost
        // in a reset connection; a silent peer gets a short grace only.
        let _ = tokio::time::timeout(VERDICT_GRACE, read_handshake_frame::<_, AuthFrame>(r)).await;
        return Err(FrameError::PeerNotAuthenticated);
    }
    match read_handshake_frame(r).await {
        Ok(AuthFrame::Verdict { accepted: true }) => sent,
        Ok(AuthFrame::Verdict { accepted: false }) => Err(FrameError::RefusedByPeer),
        Ok(_) => Err(FrameError::Unexpected("a verdict")),
        Err(e) => sent.and(Err(e)),
    }
}

fn random() -> Result<[u8; SECRET_LEN], SecretError> {
    let mut bytes = [0u8; SECRET_LEN];
    getrandom::getrandom(&mut bytes).map_err(SecretError::Random)?;
    Ok(bytes)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes.iter().flat_map(|b| [DIGITS[usize::from(b >> 4)] as char, DIGITS[usize::from(b & 15)] as char]).collect()
}

fn decode_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let text = text.as_bytes();
    if text.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; N];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

fn wipe(bytes: &mut [u8]) {
    for b in bytes.iter_mut() {
        // SAFETY: a valid, aligned, exclusive reference to one byte.
        unsafe { std::ptr::write_volatile(b, 0) };
    }
}

fn wipe_string(s: &mut String) {
    // SAFETY: zero bytes keep the string valid UTF-8.
    wipe(unsafe { s.as_mut_vec() });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(byte: u8) -> Secret {
        Secret::from_bytes([byte; SECRET_LEN])
    }

    /// Run both sides of the exchange over an in-memory pipe.
    async fn exchange(launcher: &Secret, daemon: &Secret, node: NodeId) -> (Result<(), FrameError>, Result<(), FrameError>) {
        let (a, b) = tokio::io::duplex(1 << 12);
        let (mut ar, mut aw) = tokio::io::split(a);
        let (mut br, mut bw) = tokio::io::split(b);
        tokio::join!(authenticate(&mut ar, &mut aw, launcher, Role::Launcher, node), authenticate(&mut br, &mut bw, daemon, Role::Daemon, node),)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_same_secret_passes_both_ways() {
        let s = Secret::generate().unwrap();
        let (l, d) = exchange(&s, &s.clone(), NodeId(3)).await;
        l.unwrap();
        d.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_wrong_secret_fails_on_both_sides() {
        let (l, d) = exchange(&secret(1), &secret(2), NodeId(0)).await;
        // Each side finds the other's proof wrong.
        assert!(matches!(l, Err(FrameError::PeerNotAuthenticated)), "{l:?}");
        assert!(matches!(d, Err(FrameError::PeerNotAuthenticated)), "{d:?}");
    }

    #[test]
    fn a_proof_is_bound_to_the_secret_role_node_and_both_nonces() {
        let (s, ln, dn) = (secret(7), [1u8; 32], [2u8; 32]);
        let p = proof(&s, Role::Daemon, NodeId(4), &ln, &dn);
        assert!(verify(&s, Role::Daemon, NodeId(4), &ln, &dn, &p));
        assert!(!verify(&secret(8), Role::Daemon, NodeId(4), &ln, &dn, &p), "another secret");
        assert!(!verify(&s, Role::Launcher, NodeId(4), &ln, &dn, &p), "reflected as the other role");
        assert!(!verify(&s, Role::Daemon, NodeId(5), &ln, &dn, &p), "another node");
        assert!(!verify(&s, Role::Daemon, NodeId(4), &[9u8; 32], &dn, &p), "replayed against a fresh launcher nonce");
        assert!(!verify(&s, Role::Daemon, NodeId(4), &ln, &[9u8; 32], &p), "another daemon nonce");
        assert!(!verify(&s, Role::Daemon, NodeId(4), &ln, &dn, &p[..31]), "truncated");
    }

    /// A peer that replays a daemon's frames recorded on an earlier link
    /// (same secret, same node) is refused: the launcher's nonce is new.
    #[tokio::test(flavor = "current_thread")]
    async fn a_replayed_proof_fails() {
        let s = secret(5);
        let old_launcher_nonce = [3u8; 32];
        let recorded_daemon_nonce = [4u8; 32];
        let recorded = proof(&s, Role::Daemon, NodeId(0), &old_launcher_nonce, &recorded_daemon_nonce);

        let (a, b) = tokio::io::duplex(1 << 12);
        let (mut ar, mut aw) = tokio::io::split(a);
        let (mut br, mut bw) = tokio::io::split(b);
        let replayer = async {
            write_handshake_frame(&mut bw, &AuthFrame::Challenge { nonce: hex(&recorded_daemon_nonce) }).await.unwrap();
            let _: AuthFrame = read_handshake_frame(&mut br).await.unwrap();
            write_handshake_frame(&mut bw, &AuthFrame::Proof { mac: hex(&recorded) }).await.unwrap();
            let _: AuthFrame = read_handshake_frame(&mut br).await.unwrap();
            write_handshake_frame(&mut bw, &AuthFrame::Verdict { accepted: true }).await.unwrap();
            let verdict: AuthFrame = read_handshake_frame(&mut br).await.unwrap();
            verdict
        };
        let (launcher, verdict) = tokio::join!(authenticate(&mut ar, &mut aw, &s, Role::Launcher, NodeId(0)), replayer);
        assert!(matches!(launcher, Err(FrameError::PeerNotAuthenticated)), "{launcher:?}");
        assert!(matches!(verdict, AuthFrame::Verdict { accepted: false }));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn garbage_instead_of_a_challenge_is_an_error() {
        let (a, b) = tokio::io::duplex(1 << 12);
        let (mut ar, mut aw) = tokio::io::split(a);
        let (_br, mut bw) = tokio::io::split(b);
        tokio::io::AsyncWriteExt::write_all(&mut bw, b"\0\0\0\x05hello").await.unwrap();
        let r = authenticate(&mut ar, &mut aw, &secret(1), Role::Launcher, NodeId(0)).await;
        assert!(matches!(r, Err(FrameError::DecodeHandshake(_))), "{r:?}");
    }

    #[test]
    fn hex_round_trips_and_rejects_bad_input() {
        let s = Secret::generate().unwrap();
        let text = s.to_hex();
        assert_eq!(text.len(), 64);
        assert_eq!(Secret::from_hex(&format!("{text}\n")).unwrap(), s);
        assert!(Secret::from_hex(&text[..63]).is_err());
        assert!(Secret::from_hex(&format!("{}g", &text[..63])).is_err());
        assert_ne!(Secret::generate().unwrap(), s, "two fresh secrets differ");
        assert_eq!(format!("{s:?}"), "Secret(..)", "Debug never shows the secret");
    }

    #[test]
    fn only_a_private_file_of_ours_is_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("dpm-auth-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secret");
        let s = secret(0xab);
        std::fs::write(&path, format!("{}\n", s.to_hex())).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Secret::read_file(&path).unwrap(), s);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = Secret::read_file(&path).unwrap_err();
        assert!(e.to_string().contains("has mode 640"), "{e}");
        assert!(matches!(Secret::read_file(&dir), Err(SecretError::Unsafe { .. })), "a directory");
        assert!(matches!(Secret::read_file(&dir.join("missing")), Err(SecretError::Read { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
