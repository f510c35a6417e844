//! `--soak MINUTES`: whether the server's memory stays flat under a long load and comes
//! back once the runs end. A server child (as for the idle figure, so only the server is
//! measured) gets the bench's sessions, a short ping-pong for its maximum rate, then the
//! open loop at half of it for MINUTES, its RSS read every `SAMPLE` seconds; then every
//! run is cancelled, the sessions close, and the RSS is read for another minute.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::idle::{rss_kib, start_child};
use crate::load::{self, Mode, Target};
use runplane::grpc::pb;
use runplane::grpc::pb::run_service_client::RunServiceClient;

/// Seconds between RSS samples under load.
const SAMPLE: u64 = 15;
/// How long RSS is followed after the runs end.
const AFTER_END: Duration = Duration::from_secs(60);

/// One RSS reading.
pub struct Sample {
    /// Seconds since the load began (or since the runs ended).
    pub secs: f64,
    /// The server's resident set, KiB.
    pub rss_kib: u64,
    /// Decisions answered since the load began.
    pub decisions: u64,
}

/// What the soak measured.
pub struct SoakResult {
    /// Sessions (one run each).
    pub sessions: usize,
    /// The open loop's rate, round trips per second.
    pub rate: f64,
    /// RSS of the started server before any run.
    pub idle_kib: u64,
    /// Under load.
    pub under_load: Vec<Sample>,
    /// After every run was cancelled and its session closed.
    pub after_end: Vec<Sample>,
}

pub async fn run(
    dir: &std::path::Path,
    policy_dir: &std::path::Path,
    sessions: usize,
    connections: usize,
    minutes: f64,
) -> anyhow::Result<SoakResult> {
    let child = start_child(dir, policy_dir, "soak-data").await?;
    let pid = child.pid;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_kib = rss_kib(pid)?;
    let channels = load::connect(&child.url, connections).await?;
    let token = Some(child.token.as_str());
    let open = load::open_sessions(&channels, Target::Runplane, "bench", token, sessions).await?;
    let (open, max) = load::run_phase(open, Mode::PingPong, Duration::from_secs(5)).await?;
    let rate = max.round_trips_per_sec() / 2.0;
    eprintln!(
        "… soak: {sessions} sessions, open loop at {rate:.0} round trips/s for {minutes} min"
    );

    let mut open = open;
    let mut under_load = Vec::new();
    let mut decisions = 0;
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(minutes * 60.0);
    while Instant::now() < end {
        let slice = Duration::from_secs(SAMPLE).min(end - Instant::now());
        let (sessions, phase) = load::run_phase(open, Mode::OpenLoop { rate }, slice).await?;
        open = sessions;
        decisions += phase.decisions;
        let sample = Sample {
            secs: start.elapsed().as_secs_f64(),
            rss_kib: rss_kib(pid)?,
            decisions,
        };
        eprintln!(
            "… soak: {:>5.0} s  RSS {:>7} KiB  {} decisions",
            sample.secs, sample.rss_kib, sample.decisions
        );
        under_load.push(sample);
    }

    let run_ids: Vec<String> = open.iter().map(|s| s.run_id().to_string()).collect();
    cancel_all(&channels, &child.token, &run_ids).await?;
    drop(open);
    let ended = Instant::now();
    let mut after_end = Vec::new();
    while ended.elapsed() < AFTER_END {
        tokio::time::sleep(Duration::from_secs(SAMPLE)).await;
        after_end.push(Sample {
            secs: ended.elapsed().as_secs_f64(),
            rss_kib: rss_kib(pid)?,
            decisions,
        });
    }
    Ok(SoakResult {
        sessions,
        rate,
        idle_kib,
        under_load,
        after_end,
    })
}

/// Cancels every run, a few hundred at a time.
async fn cancel_all(
    channels: &[tonic::transport::Channel],
    token: &str,
    run_ids: &[String],
) -> anyhow::Result<()> {
    let header: tonic::metadata::MetadataValue<_> = format!("Bearer {token}")
        .parse()
        .context("the admin token cannot be sent as a header")?;
    for (chunk_no, chunk) in run_ids.chunks(256).enumerate() {
        let mut cancels = Vec::with_capacity(chunk.len());
        for (i, run_id) in chunk.iter().enumerate() {
            let channel = channels[(chunk_no + i) % channels.len()].clone();
            let mut request = tonic::Request::new(pb::CancelRunRequest {
                run_id: run_id.clone(),
                reason: "soak over".into(),
            });
            request
                .metadata_mut()
                .insert("authorization", header.clone());
            cancels.push(tokio::spawn(async move {
                RunServiceClient::new(channel).cancel_run(request).await
            }));
        }
        for cancel in cancels {
            cancel.await?.context("CancelRun")?;
        }
    }
    Ok(())
}

/// The soak's figures as text: every sample, then the verdict's numbers.
pub fn report(result: &SoakResult) -> String {
    let mut out = format!(
        "Soak: {} sessions at {:.0} round trips/s; idle server {} KiB\n",
        result.sessions, result.rate, result.idle_kib
    );
    for sample in &result.under_load {
        out.push_str(&format!(
            "  load  {:>6.0} s  {:>8} KiB  {:>10} decisions\n",
            sample.secs, sample.rss_kib, sample.decisions
        ));
    }
    for sample in &result.after_end {
        out.push_str(&format!(
            "  ended {:>6.0} s  {:>8} KiB\n",
            sample.secs, sample.rss_kib
        ));
    }
    // Warm-up: the first third of the load.
    let warm = &result.under_load[result.under_load.len() / 3..];
    if let (Some(first), Some(last)) = (warm.first(), warm.last()) {
        let minutes = (last.secs - first.secs) / 60.0;
        let growth = last.rss_kib as f64 - first.rss_kib as f64;
        out.push_str(&format!(
            "After warm-up: {} → {} KiB over {:.1} min ({:+.0} KiB/min) while {} decisions were made\n",
            first.rss_kib,
            last.rss_kib,
            minutes,
            growth / minutes.max(1e-9),
            last.decisions - first.decisions
        ));
    }
    if let Some(last) = result.after_end.last() {
        out.push_str(&format!(
            "{:.0} s after the runs ended: {} KiB (idle {} KiB)\n",
            last.secs, last.rss_kib, result.idle_kib
        ));
    }
    out
}
