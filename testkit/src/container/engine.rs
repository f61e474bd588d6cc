//! The container engine as the testkit sees it: is one reachable (checked
//! before testcontainers tries, so the error can say what to do), what an
//! engine error means, and the tail of a container's log for error messages.

use std::time::Duration;

use testcontainers::core::client::ClientError;
use testcontainers::{ContainerAsync, Image, TestcontainersError};

use super::error::Error;

/// The socket testcontainers (and the docker CLI) use when `DOCKER_HOST` is unset.
const DEFAULT_SOCKET: &str = "unix:///var/run/docker.sock";

/// How many lines of a container's log an error message carries.
pub(crate) const LOG_LINES: usize = 50;

/// Checks that the engine testcontainers will use answers a connection,
/// bounded by a few seconds.
pub(crate) async fn check_reachable() -> Result<(), Error> {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.trim().is_empty() => check_at(host.trim()).await,
        _ => {
            // testcontainers also reads ~/.testcontainers.properties; when
            // that may name the engine, leave the verdict to it.
            let props = std::env::var_os("HOME")
                .map(|h| std::path::Path::new(&h).join(".testcontainers.properties"));
            if props.is_some_and(|p| p.exists()) {
                return Ok(());
            }
            check_at(DEFAULT_SOCKET).await
        }
    }
}

/// Connects to `docker_host` (`unix://PATH` or `tcp://HOST:PORT`); other
/// schemes are left to testcontainers.
pub(crate) async fn check_at(docker_host: &str) -> Result<(), Error> {
    let unreachable = |reason: String| Error::EngineUnreachable {
        docker_host: docker_host.to_owned(),
        reason,
    };
    let timeout = Duration::from_secs(3);
    let attempt = async {
        if let Some(path) = docker_host.strip_prefix("unix://") {
            tokio::net::UnixStream::connect(path).await.map(drop)
        } else if let Some(addr) = docker_host.strip_prefix("tcp://") {
            tokio::net::TcpStream::connect(addr.trim_end_matches('/'))
                .await
                .map(drop)
        } else {
            Ok(())
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable(format!("no answer within {timeout:?}"))),
    }
}

/// Turns an engine error from creating a container into the testkit's
/// error: a failed pull means the image is missing.
pub(crate) fn classify_start_error(image: &str, e: TestcontainersError) -> Error {
    match e {
        TestcontainersError::Client(ClientError::PullImage { err, .. }) => Error::ImageMissing {
            image: image.to_owned(),
            reason: err.to_string(),
        },
        other => Error::Engine(other),
    }
}

/// The last [`LOG_LINES`] lines of a container's output (standard output,
/// then standard error); a log that cannot be read says so instead.
pub(crate) async fn log_tail<I: Image>(container: &ContainerAsync<I>) -> String {
    let mut text = match container.stdout_to_vec().await {
        Ok(out) => String::from_utf8_lossy(&out).into_owned(),
        Err(e) => format!("(standard output unreadable: {e})\n"),
    };
    if let Ok(err) = container.stderr_to_vec().await {
        text.push_str(&String::from_utf8_lossy(&err));
    }
    last_lines(&text, LOG_LINES)
}

/// The last `n` lines of `text`.
pub(crate) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_absent_socket_is_an_error_naming_docker_host_and_podman() {
        let err = check_at("unix:///nonexistent/purekafka-testkit.sock")
            .await
            .expect_err("no engine listens there");
        let msg = err.to_string();
        assert!(matches!(err, Error::EngineUnreachable { .. }), "{err:?}");
        assert!(msg.contains("DOCKER_HOST"), "{msg}");
        assert!(msg.contains("podman system service"), "{msg}");
        assert!(msg.contains("/nonexistent/purekafka-testkit.sock"), "{msg}");
    }

    #[tokio::test]
    async fn a_closed_tcp_port_is_unreachable() {
        // Bind then drop: the port is free and nothing listens on it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let err = check_at(&format!("tcp://127.0.0.1:{port}"))
            .await
            .expect_err("nothing listens");
        assert!(matches!(err, Error::EngineUnreachable { .. }), "{err:?}");
    }

    #[test]
    fn last_lines_keeps_the_tail() {
        let text: String = (1..=80).map(|i| format!("line {i}\n")).collect();
        let tail = last_lines(&text, LOG_LINES);
        assert_eq!(tail.lines().count(), 50);
        assert!(tail.starts_with("line 31"), "{tail}");
        assert!(tail.ends_with("line 80"), "{tail}");
        assert_eq!(last_lines("a\nb", 50), "a\nb");
    }
}
