//! Exports dpm's own `accept` and `read` (`dpm_daemon::pmix_guard`) in the
//! binary's dynamic symbol table, so that the PMIx server library dpm loads
//! at run time binds its calls to them before libc's: every connection the
//! library accepts is checked against the kernel's word on its owner, and
//! reads on those connections re-arm `TCP_QUICKACK`.
fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=accept");
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=read");
}
