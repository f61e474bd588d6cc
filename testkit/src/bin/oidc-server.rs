//! A test OIDC identity provider for `scripts/kafka up --oidc`: serves the
//! token endpoint and the JWKS of [`purekafka_testkit::oidc`] until SIGTERM
//! or SIGINT, and prints its address once it listens.
//!
//! ```text
//! oidc-server [--listen 127.0.0.1:19395] [--issuer I] [--audience A]
//!             --client ID:SECRET:LIFETIME_SECONDS [--client ...]
//! ```

use purekafka_testkit::oidc::{OidcClient, OidcConfig, OidcServer};

fn usage(reason: &str) -> ! {
    eprintln!("oidc-server: {reason}");
    eprintln!("usage: oidc-server [--listen ADDR] [--issuer I] [--audience A] --client ID:SECRET:LIFETIME_SECONDS...");
    std::process::exit(2)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut listen = "127.0.0.1:19395".to_owned();
    let mut config = OidcConfig {
        clients: Vec::new(),
        issuer: "purekafka-test-idp".into(),
        audience: "purekafka-test".into(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--listen" => listen = value(),
            "--issuer" => config.issuer = value(),
            "--audience" => config.audience = value(),
            "--client" => match OidcClient::parse(&value()) {
                Ok(c) => config.clients.push(c),
                Err(e) => usage(&e),
            },
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if config.clients.is_empty() {
        usage("at least one --client is needed");
    }
    let addr = listen
        .parse()
        .unwrap_or_else(|_| usage(&format!("{listen} is not ip:port")));
    let server = match OidcServer::start(addr, config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("oidc-server: cannot listen on {listen}: {e}");
            std::process::exit(1)
        }
    };
    println!("{}", server.addr());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .unwrap_or_else(|e| {
            eprintln!("oidc-server: no SIGTERM handler: {e}");
            std::process::exit(1)
        });
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
