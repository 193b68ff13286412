//! Compiles the Postgres variants of the integration tests only when `ACP_TEST_POSTGRES_URL`
//! is set, and the browser tests only when `ACP_TEST_BROWSER` is set, so that a run without them
//! does not pretend to have tested them.
fn main() {
    println!("cargo:rustc-check-cfg=cfg(acp_postgres)");
    println!("cargo:rustc-check-cfg=cfg(acp_browser)");
    println!("cargo:rerun-if-env-changed=ACP_TEST_POSTGRES_URL");
    println!("cargo:rerun-if-env-changed=ACP_TEST_BROWSER");
    if std::env::var("ACP_TEST_BROWSER").is_ok_and(|v| !v.is_empty()) {
        println!("cargo:rustc-cfg=acp_browser");
    }
    if std::env::var("ACP_TEST_POSTGRES_URL").is_ok_and(|v| !v.is_empty()) {
        println!("cargo:rustc-cfg=acp_postgres");
    }
}
