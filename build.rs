//! Compiles the Postgres variants of the integration tests only when `ACP_TEST_POSTGRES_URL`
//! is set, so that a run without Postgres does not pretend to have tested it.
fn main() {
    println!("cargo:rustc-check-cfg=cfg(acp_postgres)");
    println!("cargo:rerun-if-env-changed=ACP_TEST_POSTGRES_URL");
    if std::env::var("ACP_TEST_POSTGRES_URL").is_ok_and(|v| !v.is_empty()) {
        println!("cargo:rustc-cfg=acp_postgres");
    }
}
