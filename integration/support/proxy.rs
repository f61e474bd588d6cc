//! A loopback TCP proxy in front of a real broker, for fault injection: it
//! can cut every connection (as if the broker process died) or stop
//! forwarding broker bytes (as if the broker hung).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; dropping it stops accepting.
pub struct Proxy {
    /// The proxy's listening port on 127.0.0.1.
    pub port: u16,
    stall: Arc<AtomicBool>,
    kill: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy forwarding to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let stall = Arc::new(AtomicBool::new(false));
        let (kill, kill_rx) = watch::channel(false);
        let upstream = upstream.to_owned();
        let stall2 = stall.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(pipe(client, server, stall2.clone(), kill_rx.clone()));
            }
        });
        Proxy {
            port,
            stall,
            kill,
            accept,
        }
    }

    /// Stops forwarding broker→client bytes (connections stay open).
    pub fn stall(&self) {
        self.stall.store(true, Ordering::SeqCst);
    }

    /// Closes every proxied connection at once.
    pub fn kill(&self) {
        let _ = self.kill.send(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = self.kill.send(true);
    }
}

async fn pipe(
    client: TcpStream,
    server: TcpStream,
    stall: Arc<AtomicBool>,
    mut kill: watch::Receiver<bool>,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match cr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if sw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let down = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match sr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if stall.load(Ordering::SeqCst) {
                        // Swallow: the client sees a broker that never answers.
                        continue;
                    }
                    if cw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = kill.wait_for(|k| *k) => {}
    }
}
