//! A tour of tokio-timewheel on its defaults (1 ms tick, hierarchical wheel, next-deadline advance),
//! in real time, in about two seconds:
//!
//! 1. connection timeouts: a few thousand connections each get a 1.5 s idle timeout; traffic
//!    arrives on most of them (timeout cancelled, or pushed back with the keep-alive call
//!    `schedule_or_reset`), the rest time out;
//! 2. game buffs: a damage-over-time buff that ticks five times, a regeneration that repeats
//!    until dispelled, a haste buff that a stun freezes for a while (pause, resume) before it
//!    expires, and a skill cooldown awaited in place;
//! 3. the game's daily reset at 05:00 Berlin time, a cron recurrence in a time zone (with the
//!    `cron` feature), and an order auto-review 48 hours out, far beyond any level-0 span, both
//!    kept pending until stop.
//!
//! Run it with `cargo run --release --example tour --features cron` (without the feature, the
//! tour skips the daily reset).

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep, Instant};
use tokio_timewheel::{Error, Repeat, Scheduler};

const CONNECTIONS: usize = 5_000;
const IDLE_TIMEOUT: Duration = Duration::from_millis(1_500);

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let started = Instant::now();
    let timer = Scheduler::builder().start()?;
    println!("tokio-timewheel tour: 1 ms tick, hierarchical wheel, sleeping to the next deadline\n");

    let connections = tokio::spawn(connection_timeouts(timer.clone()));
    let buffs = tokio::spawn(game_buffs(timer.clone()));

    println!("[order] auto-review of order 42 in 48 hours");
    timer
        .schedule("review:order-42", Duration::from_secs(48 * 3600), |key| async move {
            println!("[order] {key}: auto-reviewed with 5 stars");
        })
        .await?;

    let resets = daily_reset(&timer).await?;

    let (timed_out, cancelled) = connections.await.expect("connection task");
    buffs.await.expect("buff task")?;

    let stats = timer.stats();
    println!("\n[stats] {stats:?}");
    println!("[stats] {:?}", timer.lateness());
    println!("[stats] connections: {timed_out} timed out, {cancelled} cancelled by traffic");
    println!("[order] still pending after {:.1?}: {}", started.elapsed(), timer.contains("review:order-42"));
    let dropped = timer.stop().await;
    println!("[stop] service stopped, {dropped} pending timers dropped (the order review, the daily reset)");
    assert_eq!(dropped, 1 + resets);
    assert_eq!(timed_out + cancelled, CONNECTIONS);
    println!("tour finished in {:.1?}", started.elapsed());
    Ok(())
}

/// Every connection gets an idle timeout. Traffic arrives on nine in ten: four of them close
/// cleanly (cancel), five stay open and push their timeout back (`schedule_or_reset`, which
/// would also arm it for a connection that had none) before closing.
async fn connection_timeouts(timer: Scheduler) -> (usize, usize) {
    let timed_out = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    for i in 0..CONNECTIONS {
        let timed_out = timed_out.clone();
        timer
            .schedule(format!("conn-{i}"), IDLE_TIMEOUT, move |_key| {
                timed_out.fetch_add(1, Relaxed);
                async {}
            })
            .await
            .expect("fresh key");
    }
    println!("[conn] {CONNECTIONS} idle timeouts of {IDLE_TIMEOUT:?} scheduled in {:.1?}", t0.elapsed());

    let mut cancelled = 0;
    for wave in 0..10 {
        sleep(Duration::from_millis(100)).await;
        // Traffic on the connections whose number ends in this wave's digit.
        for i in (wave..CONNECTIONS).step_by(10).filter(|i| i % 10 != 9) {
            let key = format!("conn-{i}");
            if i % 10 < 4 {
                cancelled += usize::from(timer.cancel(&key).await);
            } else {
                let timed_out = timed_out.clone();
                let armed = timer
                    .schedule_or_reset(&key, IDLE_TIMEOUT, move |_key| {
                        timed_out.fetch_add(1, Relaxed);
                        async {}
                    })
                    .await
                    .expect("a valid key");
                assert!(!armed, "{key} was pending: pushed back, not armed anew");
            }
        }
        println!(
            "[conn] t={:>4} ms traffic wave {wave}: {} pending, {cancelled} closed, {} timed out",
            t0.elapsed().as_millis(),
            timer.len(),
            timed_out.load(Relaxed)
        );
    }
    // The pushed-back connections close later, before their new deadline.
    sleep(Duration::from_millis(600)).await;
    let busy: Vec<String> =
        (0..CONNECTIONS).filter(|i| (4..9).contains(&(i % 10))).map(|i| format!("conn-{i}")).collect();
    cancelled += timer.cancel_many(&busy).await.into_iter().filter(|&c| c).count();
    println!("[conn] t={:>4} ms the busy connections closed: {cancelled} cancelled in all", t0.elapsed().as_millis());

    // The idle ones (number ending in 9) time out at 1.5 s.
    while timer.contains(&format!("conn-{}", CONNECTIONS - 1)) {
        sleep(Duration::from_millis(50)).await;
    }
    timer.flush().await;
    println!(
        "[conn] t={:>4} ms {} idle connections timed out, none of the others",
        t0.elapsed().as_millis(),
        timed_out.load(Relaxed)
    );
    (timed_out.load(Relaxed), cancelled)
}

async fn game_buffs(timer: Scheduler) -> Result<(), Error> {
    let t0 = Instant::now();
    let at = move || t0.elapsed().as_millis();

    // Poison: five ticks of damage, one every 250 ms.
    let poison = timer
        .schedule_repeating("poison:player-1", Duration::from_millis(250), Repeat::Times(5), move |key| async move {
            println!("[buff] t={:>4} ms {key}: -5 hp", at());
        })
        .await?;
    // Regeneration until dispelled.
    timer
        .schedule_repeating("regen:player-2", Duration::from_millis(400), Repeat::Forever, move |key| async move {
            println!("[buff] t={:>4} ms {key}: +3 hp", at());
        })
        .await?;
    // Haste expires after 1 s of play; a stun at 300 ms freezes it for 400 ms.
    timer
        .schedule("haste:player-1", Duration::from_secs(1), move |key| async move {
            println!("[buff] t={:>4} ms {key}: expired, speed back to normal", at());
        })
        .await?;
    let stun = {
        let timer = timer.clone();
        tokio::spawn(async move {
            sleep(Duration::from_millis(300)).await;
            let left = timer.pause("haste:player-1").await?;
            println!("[buff] t={:>4} ms haste:player-1: stunned, {left:.1?} left stands still", at());
            sleep(Duration::from_millis(400)).await;
            let left = timer.resume("haste:player-1").await?;
            println!("[buff] t={:>4} ms haste:player-1: stun over, {left:.1?} to go", at());
            Ok::<(), Error>(())
        })
    };

    // A skill cooldown, awaited in place, while the UI reads how long is left.
    let cooldown = timer.sleep_keyed("cooldown:player-1:fireball", Duration::from_millis(600));
    let ui = {
        let timer = timer.clone();
        tokio::spawn(async move {
            sleep(Duration::from_millis(200)).await;
            if let Some(ready_at) = timer.deadline("cooldown:player-1:fireball") {
                let left = ready_at.saturating_duration_since(Instant::now());
                println!("[buff] t={:>4} ms cooldown:player-1:fireball: ready in {:.1} s", at(), left.as_secs_f64());
            }
        })
    };
    cooldown.await?;
    ui.await.expect("ui task");
    println!("[buff] t={:>4} ms cooldown:player-1:fireball: ready again", at());

    poison.await?;
    println!("[buff] t={:>4} ms poison:player-1: worn off after 5 ticks", at());
    stun.await.expect("stun task")?;
    sleep(Duration::from_millis(500)).await;
    let dispelled = timer.cancel("regen:player-2").await;
    println!("[buff] t={:>4} ms regen:player-2: dispelled ({dispelled})", at());
    Ok(())
}

/// The game's daily reset (quests, shop) at 05:00 server time, Berlin: 05:00 CET in winter and
/// 05:00 CEST in summer, once a day across the clock changes. Returns how many timers it left
/// pending.
#[cfg(feature = "cron")]
async fn daily_reset(timer: &Scheduler) -> Result<usize, Error> {
    use tokio_timewheel::Recurrence;

    let reset = Recurrence::cron("0 5 * * *")?.in_tz("Europe/Berlin")?;
    timer
        .schedule_recurring("daily-reset", &reset, |key| async move {
            println!("[reset] {key}: daily quests refilled");
        })
        .await?;
    let left = timer.deadline("daily-reset").expect("pending").saturating_duration_since(Instant::now());
    println!("[reset] daily reset, {reset}: next in {:.1} h", left.as_secs_f64() / 3600.0);
    Ok(1)
}

/// Without the `cron` feature, the tour has no calendar to run the daily reset on; a fixed rate
/// of 24 h from now is no reset at 05:00.
#[cfg(not(feature = "cron"))]
async fn daily_reset(_timer: &Scheduler) -> Result<usize, Error> {
    println!("[reset] the daily reset at 05:00 Berlin time needs the `cron` feature: --features cron");
    Ok(0)
}
