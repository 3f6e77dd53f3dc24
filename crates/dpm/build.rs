//! Exports dpm's own `accept` (`dpm_daemon::pmix_guard`) in the binary's
//! dynamic symbol table, so that the PMIx server library dpm loads at run
//! time binds its `accept` calls to it before libc's: every connection the
//! library accepts is checked against the kernel's word on its owner.
fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=accept");
}
