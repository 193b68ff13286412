#![forbid(unsafe_code)]

/// mimalloc instead of the system allocator: a check allocates many small, short-lived
/// objects (Cedar values, JSON), and glibc's malloc/free was a fifth of the server's time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let cli = match acp::cli::parse() {
        Ok(cli) => cli,
        Err(code) => std::process::exit(code),
    };
    match acp::cli::run(cli).await {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            let _ = acp::cli::output::eline(format!("error: {err:#}"));
            std::process::exit(1);
        }
    }
}
