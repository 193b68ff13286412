#![forbid(unsafe_code)]

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = acp::cli::Cli::parse();
    match acp::cli::run(cli).await {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::exit(1);
        }
    }
}
