//! Outgoing webhooks: when an upload starts a new OOM group (`group.new`) or reopens a resolved
//! one (`group.regression`), every receiver of the team gets a POST of the event as JSON, signed
//! with its secret: `X-Oomlens-Signature: sha256=HEX` is the HMAC-SHA256 of the body, and
//! `X-Oomlens-Event` names the event. Deliveries run in the background, three attempts (after 0,
//! 1 and 5 s) until a 2xx answer, each recorded in `webhook_deliveries`.

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use sqlx::PgPool;

use crate::db::webhooks;

/// Header with the body's signature.
pub const SIGNATURE_HEADER: &str = "x-oomlens-signature";
/// Header with the event's name.
pub const EVENT_HEADER: &str = "x-oomlens-event";
/// Waits before each attempt.
const ATTEMPTS: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_secs(1),
    Duration::from_secs(5),
];

/// `sha256=HEX` of the HMAC-SHA256 of `body` under `secret`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Sends `event` with `payload` to every receiver of the team, in the background.
pub fn notify(pool: PgPool, team_id: i64, event: &'static str, payload: serde_json::Value) {
    tokio::spawn(async move {
        if let Err(e) = deliver_all(&pool, team_id, event, &payload).await {
            tracing::warn!(error = %e, event, "webhook deliveries could not be recorded");
        }
    });
}

async fn deliver_all(
    pool: &PgPool,
    team_id: i64,
    event: &'static str,
    payload: &serde_json::Value,
) -> sqlx::Result<()> {
    let targets = webhooks::targets(pool, team_id).await?;
    if targets.is_empty() {
        return Ok(());
    }
    let body = payload.to_string();
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .user_agent(concat!("oomlens/", env!("CARGO_PKG_VERSION")))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "no HTTP client for webhooks");
            return Ok(());
        }
    };
    for (id, url, secret) in targets {
        let delivery = webhooks::start_delivery(pool, id, event, &body).await?;
        let sig = signature(&secret, body.as_bytes());
        for wait in ATTEMPTS {
            tokio::time::sleep(wait).await;
            let sent = client
                .post(&url)
                .header("content-type", "application/json")
                .header(SIGNATURE_HEADER, &sig)
                .header(EVENT_HEADER, event)
                .body(body.clone())
                .send()
                .await;
            let (status, error, ok) = match sent {
                Ok(r) if r.status().is_success() => (Some(r.status().as_u16()), None, true),
                Ok(r) => (
                    Some(r.status().as_u16()),
                    Some(format!("HTTP {}", r.status())),
                    false,
                ),
                Err(e) => (None, Some(e.to_string()), false),
            };
            webhooks::record_attempt(pool, delivery, status, error.as_deref(), ok).await?;
            if ok {
                tracing::info!(webhook = %id, event, "webhook delivered");
                break;
            }
            tracing::warn!(webhook = %id, event, error = error.as_deref().unwrap_or(""), "webhook delivery failed");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hmac_sha256_of_the_body() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
