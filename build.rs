//! Compiles the Postgres variants of the integration tests only when `ACP_TEST_POSTGRES_URL`
//! is set, and the browser tests only when `ACP_TEST_BROWSER` is set, so that a run without them
//! does not pretend to have tested them.
//!
//! Also tells the binary what it was built from, for the `acp_build_info` metric: the commit
//! (`git rev-parse HEAD`, when the source is a git checkout and git is installed; `unknown`
//! otherwise), the Cargo profile and the compiler's version. Nothing here uses the network.
use std::path::{Path, PathBuf};
use std::process::Command;

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
    build_info();
}

/// `ACP_BUILD_GIT_SHA`, `ACP_BUILD_PROFILE` and `ACP_BUILD_RUSTC` for `env!` in the crate.
fn build_info() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let sha = git(&manifest, &["rev-parse", "HEAD"])
        .filter(|sha| sha.len() == 40 && sha.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=ACP_BUILD_GIT_SHA={sha}");
    // Run again when HEAD moves: HEAD itself (a checkout), the branch it points at (a commit),
    // and the packed refs. Only files that exist are named: Cargo runs a build script whose
    // named file is missing on every build.
    for file in ["HEAD", "packed-refs"] {
        watch(
            git(&manifest, &["rev-parse", "--git-path", file]),
            &manifest,
        );
    }
    if let Some(branch) = git(&manifest, &["symbolic-ref", "-q", "HEAD"]) {
        watch(
            git(&manifest, &["rev-parse", "--git-path", &branch]),
            &manifest,
        );
    }

    println!("cargo:rustc-env=ACP_BUILD_PROFILE={}", profile());

    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        // `rustc 1.91.0 (f8297e351 2025-10-28)`: the version alone.
        .and_then(|text| text.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=ACP_BUILD_RUSTC={version}");
}

/// The Cargo profile's name (`debug` for the dev profile, `release`, `quick`, ...): the folder
/// of `target/` the build writes to, three levels above `OUT_DIR`
/// (`target/PROFILE/build/acp-HASH/out`). Cargo's `PROFILE` variable says only `debug` or
/// `release`, so a custom profile would read as `release`; it is the fallback.
fn profile() -> String {
    std::env::var_os("OUT_DIR")
        .map(PathBuf::from)
        .and_then(|out| {
            out.ancestors()
                .nth(3)
                .and_then(Path::file_name)
                .map(|name| name.to_string_lossy().into_owned())
        })
        .filter(|name| !name.is_empty() && name != "target")
        .or_else(|| std::env::var("PROFILE").ok())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `git ARGS` in `dir`, its output trimmed, or `None` (no git, not a checkout, an error).
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty())
}

/// `cargo:rerun-if-changed` for `path` (relative to `dir`), when it exists.
fn watch(path: Option<String>, dir: &Path) {
    let Some(path) = path else { return };
    let path = dir.join(path);
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
