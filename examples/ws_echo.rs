//! A raw WebSocket echo server: the floor `benches/server_load.py` compares
//! car-server's `proposal.submit` latency with. Built on the daemon's own
//! stack (a multi-thread tokio runtime, tokio-tungstenite with the daemon's
//! 8 KiB read buffer, TCP_NODELAY); each text or binary frame is sent back
//! unchanged from the connection's task, with no JSON and no task hop.
//!
//! usage: cargo run --release --features server --example ws_echo [PORT]
//! (port 0, the default, picks a free one; the chosen address is printed as
//! `listening on ws://127.0.0.1:PORT/` on stderr).

use futures::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

fn main() -> std::io::Result<()> {
    let port: u16 = match std::env::args().nth(1) {
        Some(p) => p.parse().map_err(|e| std::io::Error::other(format!("port `{p}`: {e}")))?,
        None => 0,
    };
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        eprintln!("ws_echo: listening on ws://{}/ (echo)", listener.local_addr()?);
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let config = WebSocketConfig::default().read_buffer_size(8 * 1024);
                let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await else {
                    return;
                };
                while let Some(Ok(m)) = ws.next().await {
                    if m.is_close() {
                        break;
                    }
                    if (m.is_text() || m.is_binary()) && ws.send(m).await.is_err() {
                        break;
                    }
                }
            });
        }
    })
}
