//! `Execute`: one command to its end, and the call's deadline as its
//! command timeout.
//!
//! The client's deadline (the `grpc-timeout` header; the Python client's
//! `timeout`) becomes the command timeout, a little before it, so the
//! engine's kill (TERM, grace, KILL, everything the command started) runs
//! and the answer is `DEADLINE_EXCEEDED`, never a normal exit just before
//! the client gives up. Should the kill outlast the deadline itself, the
//! answer goes at the deadline anyway and dropping the execution kills what
//! is left at once. The output is the one-shot result's: folded to the
//! token budget, head and tail with the spill file named in between.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::plan::{ProcessRequest, result_status, run_one_shot};
use super::proto::process_v1::ExecuteResponse;
use crate::broker::Broker;
use crate::gate::Caller;
use crate::plan::caps::MAX_TIMEOUT_MS;
use crate::result::Status as ResultStatus;

/// How long before the call's deadline the command is killed, so the kill
/// is under way when the answer goes.
pub(crate) const DEADLINE_MARGIN: Duration = Duration::from_millis(50);
/// How long before the deadline the answer goes even if the kill is not
/// over (the call itself would otherwise end as `CANCELLED`).
pub(crate) const ANSWER_MARGIN: Duration = Duration::from_millis(5);

/// The deadline a `grpc-timeout` value (digits and a unit: `H`, `M`, `S`,
/// `m`, `u`, `n`) sets from `now`; `None` when absent or malformed.
pub(crate) fn deadline_of(
    metadata: &tonic::metadata::MetadataMap,
    now: Instant,
) -> Option<Instant> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    now.checked_add(parse_grpc_timeout(value)?)
}

fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let digits = value.get(..value.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match value.as_bytes().last()? {
        b'H' => Duration::from_secs(n.checked_mul(3600)?),
        b'M' => Duration::from_secs(n.checked_mul(60)?),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Runs `req` to its end under `deadline`.
pub(crate) async fn execute(
    broker: &Broker,
    caller: &Caller,
    shutdown: &CancellationToken,
    mut req: ProcessRequest,
    deadline: Option<Instant>,
) -> Result<ExecuteResponse, Status> {
    if let Some(at) = deadline {
        let left = at.saturating_duration_since(Instant::now());
        if left <= DEADLINE_MARGIN {
            return Err(Status::deadline_exceeded(
                "the call's deadline left no time to run",
            ));
        }
        req.timeout = Some(left - DEADLINE_MARGIN);
    }
    let answer_at = deadline.map(|at| at.checked_sub(ANSWER_MARGIN).unwrap_or(at));
    let out_of_time = async {
        match answer_at {
            Some(at) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    };
    // Dropping the run (at the deadline, at the shutdown) drops its
    // execution, which kills what is left of the command at once.
    let result = tokio::select! {
        result = run_one_shot(broker, caller, &req) => result?,
        () = out_of_time => {
            return Err(Status::deadline_exceeded("the call's deadline passed; the command was killed"));
        }
        () = shutdown.cancelled() => {
            return Err(Status::unavailable("the server is stopping; the command was killed"));
        }
    };
    if let Some(status) = result_status(&result) {
        return Err(status);
    }
    if result.status == ResultStatus::Timeout && result.capped.iter().any(|c| c == MAX_TIMEOUT_MS) {
        return Err(Status::deadline_exceeded(format!(
            "the command ran to the operator's {MAX_TIMEOUT_MS} (capped: the call asked for longer) and was killed"
        )));
    }
    if result.status == ResultStatus::Timeout && deadline.is_some() {
        return Err(Status::deadline_exceeded(
            "the call's deadline passed; the command was killed",
        ));
    }
    Ok(ExecuteResponse {
        exit_code: result.exit_code.unwrap_or(-1),
        stdout: result.stdout.into_bytes(),
        stderr: result.stderr.into_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_in_every_unit() {
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(
            parse_grpc_timeout("1500m"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_grpc_timeout("99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(parse_grpc_timeout("7n"), Some(Duration::from_nanos(7)));
    }

    #[test]
    fn malformed_grpc_timeouts_mean_no_deadline() {
        for bad in ["", "S", "5", "5s", "123456789S", "-1S", "1.5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
