//! The load: C worker sessions over K HTTP/2 connections, each playing a realistic agent
//! (reads, greps, edits, plain and compound shell lines, ~1 KiB of output per allowed
//! call), either ping-pong (one call in flight per session) or open loop at a fixed rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use hdrhistogram::Histogram;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::run_service_client::RunServiceClient;
use runplane::grpc::pb::worker_message::Message as In;
use runplane::grpc::pb::worker_service_client::WorkerServiceClient;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Streaming;

use crate::cpu::{CpuSnapshot, CpuSplit};

/// The workspace root every session attaches with; the mix's paths are inside it.
const ROOT: &str = "/work/repo";

/// One step of the agent: a tool call, and whether the bench profile allows it.
struct Step {
    tool: &'static str,
    command: &'static str,
    path: &'static str,
    allowed: bool,
}

/// Ten steps: eight allowed (each followed by a result), two denied. Decisions as the
/// `bench` profile (main.rs) gives them; the load checks every decision against this.
const MIX: [Step; 10] = [
    step("Read", "", "/work/repo/src/coordinator/actor.rs", true),
    step("Grep", "", "/work/repo/src", true),
    step("Edit", "", "/work/repo/src/main.rs", true),
    step("Bash", "cargo test --all", "", true),
    step(
        "Bash",
        "grep -rn TODO src > todo.txt && git diff --stat",
        "",
        true,
    ),
    step(
        "Bash",
        "echo \"$(git rev-parse HEAD)\" > src/rev.txt",
        "",
        true,
    ),
    step("Read", "", "/work/repo/src/lib.rs", true),
    step("Bash", "git status && rm -rf /", "", false),
    step("Read", "", "/work/repo/.env", false),
    step("Bash", "cat src/lib.rs | grep -c fn", "", true),
];

const fn step(
    tool: &'static str,
    command: &'static str,
    path: &'static str,
    allowed: bool,
) -> Step {
    Step {
        tool,
        command,
        path,
        allowed,
    }
}

/// Round trips per step of the mix: one decision, plus one result for allowed calls.
pub fn round_trips_per_step() -> f64 {
    let allowed = MIX.iter().filter(|s| s.allowed).count();
    (MIX.len() + allowed) as f64 / MIX.len() as f64
}

/// About 1 KiB of tool output, different per step.
fn output(index: usize) -> String {
    let line = format!(
        "{index:>3}: src/coordinator/actor.rs:42: let flow = self.handle(command).await?;\n"
    );
    line.repeat(1024 / line.len() + 1)[..1024].to_string()
}

/// Which server the sessions talk to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// runplane: each session is a real run under the bench profile.
    Runplane,
    /// The bare echo: no runs, every call allowed.
    Echo,
}

/// One attached session, kept across phases.
pub struct Session {
    tx: mpsc::Sender<pb::WorkerMessage>,
    rx: Streaming<pb::CoordinatorMessage>,
    run_id: String,
    /// Next call number; call ids are fresh for the whole run.
    next_call: u64,
    /// Where in the mix this session starts, so sessions do not move in lockstep.
    offset: usize,
    target: Target,
}

impl Session {
    /// The session's run.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }
}

/// Opens `k` HTTP/2 connections to `url`.
pub async fn connect(url: &str, k: usize) -> anyhow::Result<Vec<Channel>> {
    let mut channels = Vec::with_capacity(k);
    for _ in 0..k {
        let channel = Channel::from_shared(url.to_string())?
            .connect()
            .await
            .with_context(|| format!("connect to {url}"))?;
        channels.push(channel);
    }
    Ok(channels)
}

/// Starts a run under `profile` (runplane only) and attaches a session to it. `token` is
/// the operator token StartRun is sent with (`None`: the server runs with `--auth off`).
pub async fn open_session(
    channel: Channel,
    target: Target,
    profile: &str,
    token: Option<&str>,
    index: usize,
) -> anyhow::Result<Session> {
    let started = match target {
        Target::Echo => StartedRun {
            run_id: format!("echo-{index}"),
            worker_token: String::new(),
        },
        Target::Runplane => start_run(channel.clone(), profile, token, index).await?,
    };
    attach(channel, target, started, index).await
}

/// A pending run and the token its worker attaches with (empty while auth is off).
pub struct StartedRun {
    pub run_id: String,
    pub worker_token: String,
}

/// Starts a pending run under `profile`, as the operator whose `token` it sends.
pub async fn start_run(
    channel: Channel,
    profile: &str,
    token: Option<&str>,
    index: usize,
) -> anyhow::Result<StartedRun> {
    let mut request = tonic::Request::new(pb::StartRequest {
        task_id: format!("bench-task-{}", index % 100),
        agent_id: "bench-agent".into(),
        project_id: "bench".into(),
        policy_profile: profile.into(),
        ..Default::default()
    });
    if let Some(token) = token {
        let value = format!("Bearer {token}")
            .parse()
            .context("the operator token cannot be sent as a header")?;
        request.metadata_mut().insert("authorization", value);
    }
    let started = RunServiceClient::new(channel)
        .start_run(request)
        .await
        .context(
            "StartRun (is the bench profile loaded, and the operator token right? see --help)",
        )?
        .into_inner();
    Ok(StartedRun {
        run_id: started.run.context("StartRun returned no run")?.id,
        worker_token: started.worker_token,
    })
}

/// Attaches a session to a run with its worker token and waits for `Attached`.
pub async fn attach(
    channel: Channel,
    target: Target,
    run: StartedRun,
    index: usize,
) -> anyhow::Result<Session> {
    let StartedRun {
        run_id,
        worker_token,
    } = run;
    let (tx, rx) = mpsc::channel(4);
    tx.send(message(In::Attach(pb::Attach {
        run_id: run_id.clone(),
        worker_id: format!("bench-{index}"),
        token: worker_token,
        workspace_root: ROOT.into(),
    })))
    .await?;
    let mut rx = WorkerServiceClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .session(ReceiverStream::new(rx))
        .await
        .context("Session")?
        .into_inner();
    match next(&mut rx).await? {
        Out::Attached(_) => {}
        other => bail!("expected attached, got {other:?}"),
    }
    Ok(Session {
        tx,
        rx,
        run_id,
        next_call: 0,
        offset: index % MIX.len(),
        target,
    })
}

/// Opens `count` sessions spread over `channels`, at most 256 opening at once; runs are
/// started with the operator `token` (`None`: no credentials, for `--auth off` and the echo).
pub async fn open_sessions(
    channels: &[Channel],
    target: Target,
    profile: &str,
    token: Option<&str>,
    count: usize,
) -> anyhow::Result<Vec<Session>> {
    let mut sessions = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(256) {
        let mut opening = Vec::with_capacity(chunk.len());
        for &i in chunk {
            let channel = channels[i % channels.len()].clone();
            let profile = profile.to_string();
            let token = token.map(str::to_string);
            opening.push(tokio::spawn(async move {
                open_session(channel, target, &profile, token.as_deref(), i).await
            }));
        }
        for task in opening {
            sessions.push(task.await??);
        }
    }
    Ok(sessions)
}

fn message(message: In) -> pb::WorkerMessage {
    pb::WorkerMessage {
        message: Some(message),
    }
}

async fn next(rx: &mut Streaming<pb::CoordinatorMessage>) -> anyhow::Result<Out> {
    match rx.message().await? {
        Some(pb::CoordinatorMessage { message: Some(out) }) => Ok(out),
        Some(_) => bail!("empty coordinator message"),
        None => bail!("the server ended the session"),
    }
}

/// How a phase drives its sessions.
#[derive(Clone, Copy)]
pub enum Mode {
    /// One call in flight per session, the next as soon as the last is answered.
    PingPong,
    /// Steps started on a fixed schedule: this many round trips per second in total.
    OpenLoop {
        /// Round trips per second over all sessions.
        rate: f64,
    },
}

/// What a phase measured.
pub struct PhaseResult {
    /// Decisions answered within the phase.
    pub decisions: u64,
    /// Results acknowledged within the phase.
    pub results: u64,
    /// Decisions that differed from the mix's expectation (0 unless the profile changed).
    pub mismatches: u64,
    /// The phase's length.
    pub elapsed: Duration,
    /// Request → decision, nanoseconds.
    pub decision_ns: Histogram<u64>,
    /// Result → ack, nanoseconds.
    pub result_ns: Histogram<u64>,
    /// CPU spent by each thread group of this process during the phase.
    pub cpu: CpuSplit,
}

impl PhaseResult {
    /// Round trips per second: each decision and each ack counts one.
    pub fn round_trips_per_sec(&self) -> f64 {
        (self.decisions + self.results) as f64 / self.elapsed.as_secs_f64()
    }

    /// Decisions per second.
    pub fn decisions_per_sec(&self) -> f64 {
        self.decisions as f64 / self.elapsed.as_secs_f64()
    }

    /// Results per second.
    pub fn results_per_sec(&self) -> f64 {
        self.results as f64 / self.elapsed.as_secs_f64()
    }

    /// Round trips completed in the phase.
    pub fn round_trips(&self) -> u64 {
        self.decisions + self.results
    }
}

/// Latencies one session saw, merged into histograms at the end of the phase so the load
/// never contends on a shared histogram.
#[derive(Default)]
struct Samples {
    decisions: Vec<u32>,
    results: Vec<u32>,
}

/// Runs every session for `duration` in `mode`, then hands the sessions back.
pub async fn run_phase(
    sessions: Vec<Session>,
    mode: Mode,
    duration: Duration,
) -> anyhow::Result<(Vec<Session>, PhaseResult)> {
    let count = sessions.len();
    let cpu_before = CpuSnapshot::take();
    let start = Instant::now();
    let deadline = start + duration;
    let mismatches = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(count);
    for (i, session) in sessions.into_iter().enumerate() {
        let mismatches = Arc::clone(&mismatches);
        // Open loop: session i starts i/count of a period late, so steps are spread evenly.
        let schedule = match mode {
            Mode::PingPong => None,
            Mode::OpenLoop { rate } => {
                let steps_per_sec = rate / round_trips_per_step() / count as f64;
                let period = Duration::from_secs_f64(1.0 / steps_per_sec.max(1e-3));
                Some((start + period.mul_f64(i as f64 / count as f64), period))
            }
        };
        tasks.push(tokio::spawn(drive(session, schedule, deadline, mismatches)));
    }
    let mut decision_ns = histogram();
    let mut result_ns = histogram();
    let mut sessions = Vec::with_capacity(count);
    for task in tasks {
        let (session, samples) = task.await??;
        for &ns in &samples.decisions {
            decision_ns.saturating_record(u64::from(ns));
        }
        for &ns in &samples.results {
            result_ns.saturating_record(u64::from(ns));
        }
        sessions.push(session);
    }
    let cpu = CpuSnapshot::take().since(&cpu_before);
    let result = PhaseResult {
        decisions: decision_ns.len(),
        results: result_ns.len(),
        mismatches: mismatches.load(Ordering::Relaxed),
        elapsed: duration,
        decision_ns,
        result_ns,
        cpu,
    };
    Ok((sessions, result))
}

/// 1 µs to 60 s at three significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// One session's loop. Only round trips that complete before the deadline are counted.
async fn drive(
    mut session: Session,
    schedule: Option<(Instant, Duration)>,
    deadline: Instant,
    mismatches: Arc<AtomicU64>,
) -> anyhow::Result<(Session, Samples)> {
    let mut samples = Samples::default();
    let mut next_start = schedule.map(|(first, _)| first);
    let outputs: Vec<String> = (0..MIX.len()).map(output).collect();
    loop {
        if let Some(at) = next_start {
            if at >= deadline {
                break;
            }
            tokio::time::sleep_until(at).await;
        } else if Instant::now() >= deadline {
            break;
        }
        let index = (session.offset + session.next_call as usize) % MIX.len();
        let step = &MIX[index];
        let call_id = format!("c{}", session.next_call);
        session.next_call += 1;
        let sent = Instant::now();
        session
            .tx
            .send(message(In::ToolCallRequest(pb::ToolCallRequest {
                run_id: session.run_id.clone(),
                call_id: call_id.clone(),
                tool: step.tool.into(),
                command: step.command.into(),
                path: step.path.into(),
                resolved_path: String::new(),
                ..Default::default()
            })))
            .await?;
        let response = match next(&mut session.rx).await? {
            Out::ToolCallResponse(response) => response,
            other => bail!("expected a decision, got {other:?}"),
        };
        let answered = Instant::now();
        if answered <= deadline {
            samples.decisions.push(nanos(answered - sent));
        }
        let allowed = response.decision == pb::Decision::Allow as i32;
        if session.target == Target::Runplane && allowed != step.allowed {
            mismatches.fetch_add(1, Ordering::Relaxed);
        }
        if step.allowed && allowed {
            let sent = Instant::now();
            session
                .tx
                .send(message(In::ToolCallResult(pb::ToolCallResult {
                    run_id: session.run_id.clone(),
                    call_id,
                    success: true,
                    output: outputs[index].clone(),
                    error: String::new(),
                    cost_usd: 0.0004,
                    duration: Some(prost_types::Duration {
                        seconds: 0,
                        nanos: 35_000_000,
                    }),
                })))
                .await?;
            match next(&mut session.rx).await? {
                Out::ResultAck(_) => {}
                other => bail!("expected a result ack, got {other:?}"),
            }
            let acked = Instant::now();
            if acked <= deadline {
                samples.results.push(nanos(acked - sent));
            }
        }
        if let (Some(at), Some((_, period))) = (next_start.as_mut(), schedule) {
            *at += period;
        }
    }
    Ok((session, samples))
}

fn nanos(d: Duration) -> u32 {
    u32::try_from(d.as_nanos()).unwrap_or(u32::MAX)
}
