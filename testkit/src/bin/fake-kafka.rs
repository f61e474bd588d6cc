//! `fake-kafka`: the in-process fake cluster as a standalone server, for
//! tests in any language and for the Java tools.
//!
//! ```text
//! fake-kafka [--brokers N] [--port P] [--auto-create-topics] [--partitions N]
//!            [--transaction-version 1|2] [--sasl MECHANISM:USER:PASSWORD]...
//!            [--acls] [--super-user PRINCIPAL]...
//! ```
//!
//! Prints its bootstrap string as the first line of stdout, then serves
//! until SIGTERM or Ctrl-C. `--port 0` (the default) lets the OS pick free
//! ports; `--port P` uses P, P+1, ... for the brokers. Each `--sasl` adds a
//! user (`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`; the password is
//! everything after the second colon) and makes the listeners
//! `SASL_PLAINTEXT`. `--acls` runs an authorizer (Kafka's
//! `StandardAuthorizer`, `allow.everyone.if.no.acl.found=false`): requests
//! need ACLs, created with CreateAcls by a super user; each `--super-user`
//! (e.g. `User:admin`, Kafka's `super.users`) adds one and implies `--acls`.

use std::process::ExitCode;

use purekafka_testkit::fake::{Authorizer, FakeCluster, SaslMechanism};

const USAGE: &str = "usage: fake-kafka [--brokers N] [--port P] [--auto-create-topics] \
                     [--partitions N] [--transaction-version 1|2] \
                     [--sasl MECHANISM:USER:PASSWORD]... [--acls] [--super-user PRINCIPAL]...";

struct Args {
    brokers: usize,
    port: u16,
    auto_create: bool,
    partitions: i32,
    transaction_version: i16,
    sasl: Vec<(SaslMechanism, String, String)>,
    authorizer: Option<Authorizer>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        brokers: 1,
        port: 0,
        auto_create: false,
        partitions: 1,
        transaction_version: 1,
        sasl: Vec::new(),
        authorizer: None,
    };
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--brokers" => {
                parsed.brokers = value("--brokers")?
                    .parse()
                    .map_err(|e| format!("--brokers: {e}"))?
            }
            "--port" => {
                parsed.port = value("--port")?
                    .parse()
                    .map_err(|e| format!("--port: {e}"))?
            }
            "--partitions" => {
                parsed.partitions = value("--partitions")?
                    .parse()
                    .map_err(|e| format!("--partitions: {e}"))?
            }
            "--transaction-version" => {
                parsed.transaction_version = match value("--transaction-version")?.as_str() {
                    "1" => 1,
                    "2" => 2,
                    other => {
                        return Err(format!("--transaction-version: {other:?}, expected 1 or 2"))
                    }
                }
            }
            "--sasl" => {
                let spec = value("--sasl")?;
                let mut parts = spec.splitn(3, ':');
                let (Some(mechanism), Some(user), Some(password)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return Err(format!(
                        "--sasl {spec:?}: expected MECHANISM:USER:PASSWORD\n{USAGE}"
                    ));
                };
                let mechanism = SaslMechanism::parse(mechanism).ok_or_else(|| {
                    format!(
                        "--sasl: mechanism {mechanism:?}, expected PLAIN, SCRAM-SHA-256 \
                         or SCRAM-SHA-512"
                    )
                })?;
                parsed
                    .sasl
                    .push((mechanism, user.to_string(), password.to_string()));
            }
            "--auto-create-topics" => parsed.auto_create = true,
            "--acls" => {
                parsed.authorizer.get_or_insert_with(Authorizer::new);
            }
            "--super-user" => {
                let principal = value("--super-user")?;
                if principal
                    .split_once(':')
                    .is_none_or(|(kind, name)| kind.is_empty() || name.is_empty())
                {
                    return Err(format!(
                        "--super-user {principal:?}: expected a principal such as User:admin"
                    ));
                }
                let authorizer = parsed.authorizer.take().unwrap_or_default();
                parsed.authorizer = Some(authorizer.super_user(principal));
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if parsed.brokers == 0 {
        return Err("--brokers must be at least 1".into());
    }
    Ok(parsed)
}

async fn run(args: Args) -> Result<(), String> {
    let mut builder = FakeCluster::builder();
    for (mechanism, user, password) in &args.sasl {
        builder = builder.sasl_user(*mechanism, user, password);
    }
    if let Some(authorizer) = args.authorizer {
        builder = builder.authorizer(authorizer);
    }
    let cluster = builder
        .brokers(args.brokers)
        .base_port(args.port)
        .auto_create_topics(args.auto_create)
        .default_partitions(args.partitions)
        .transaction_version(args.transaction_version)
        .start()
        .await
        .map_err(|e| e.to_string())?;
    println!("{}", cluster.bootstrap());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot listen for SIGTERM: {e}"))?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    drop(cluster);
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fake-kafka: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-kafka: {e}");
            ExitCode::FAILURE
        }
    }
}
