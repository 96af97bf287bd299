//! The calls of the wake-up protocol (`worker/wake.rs` runs it): tokens pushed on the lists
//! `wake` and `lead`, and the blocking wait of an idle worker on its connection of its own, which
//! a stopping worker unblocks by its client id.

use crate::durable::store::client::WheelClient;
use crate::durable::store::deployment::Connection;

/// Pushes a token on the list `key`, keeping at most `keep + 1`; a failure is only a wake-up
/// missed, which the idle wait's safety net makes up for.
pub(crate) async fn push_token(wheel: &WheelClient, key: &str, keep: usize) {
    let Some(mut conn) = wheel.conn.shared().await else { return };
    let _: Result<(), _> =
        redis::pipe().lpush(key, 1).ignore().ltrim(key, 0, keep as isize).ignore().query_async(&mut conn).await;
}

/// The client id of `conn` on the node that holds `beside` (`CLIENT ID`).
pub(crate) async fn client_id(conn: &mut Connection, beside: &str) -> redis::RedisResult<i64> {
    conn.beside::<i64>(redis::cmd("CLIENT").arg("ID"), beside).await
}

/// The blocking wait for a token on `wake` or `lead`, up to `wait_s` seconds (`BLPOP`): the list
/// it came from, or `None` when the wait ran out.
pub(crate) fn wait_for_token(wake: &str, lead: &str, wait_s: f64) -> redis::Cmd {
    let mut blpop = redis::cmd("BLPOP");
    blpop.arg(wake).arg(lead).arg(wait_s);
    blpop
}

/// Unblocks the client `id` (`CLIENT UNBLOCK`) on the node that holds `beside`, over the shared
/// connection; a failure leaves the wait to run out or return.
pub(crate) async fn unblock(wheel: &WheelClient, id: i64, beside: &str) {
    let mut unblock = redis::cmd("CLIENT");
    unblock.arg("UNBLOCK").arg(id);
    if let Some(mut conn) = wheel.conn.shared().await {
        let _: Result<i64, _> = conn.beside(&unblock, beside).await;
    }
}

/// Pushes `tokens` tokens on the list `key`, keeping at most that many: every idle worker (up
/// to `tokens`) wakes at once. A failure is only a wake-up missed, as for [`push_token`].
pub(crate) async fn push_tokens(wheel: &WheelClient, key: &str, tokens: usize) {
    let Some(mut conn) = wheel.conn.shared().await else { return };
    let ones = vec![1; tokens.max(1)];
    let _: Result<(), _> = redis::pipe()
        .lpush(key, ones)
        .ignore()
        .ltrim(key, 0, tokens.max(1) as isize - 1)
        .ignore()
        .query_async(&mut conn)
        .await;
}
