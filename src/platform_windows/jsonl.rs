//! `agent-reach exec --jsonl` on Windows: one request per line on stdin,
//! run concurrently, each result one line on stdout as it finishes (its
//! request's `id` echoed), as on Linux. A malformed or over-long line gets
//! a `rejected` result and the stream goes on; at the end of the input the
//! requests in flight finish, then it exits 0.
//!
//! Windows has no scheduler yet, so the stream bounds itself: at most
//! [`max_in_flight`] commands run at once (the contract's scheduler
//! default, cores × 3) and the next line is not read until one ends; the
//! client's writes wait meanwhile (back-pressure, where Linux answers
//! `busy`). When stdout is gone (the reader left), the commands running
//! are ended and nothing more is read.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};

use super::engine::Execution;
use super::path_entry::session_context;
use super::run::{MAX_REQUEST_BYTES, answer, malformed};
use crate::context::ProcessContext;
use crate::exit_code;
use crate::result::NormalizedResult;

/// The most commands running at once: the contract's default scheduler
/// `global` (cores × 3).
fn max_in_flight() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from) * 3
}

/// The commands in flight, by request number: a seat each, ended together
/// when the results cannot be written.
#[derive(Debug, Default)]
struct InFlight {
    running: Mutex<Running>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Running {
    requests: usize,
    executions: BTreeMap<u64, Execution>,
    stopped: bool,
}

impl InFlight {
    /// Waits for a free seat; `false` once the stream stopped.
    fn take_seat(&self, limit: usize) -> bool {
        let mut running = crate::sync::lock(&self.running);
        while running.requests >= limit && !running.stopped {
            running = self
                .changed
                .wait(running)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        if running.stopped {
            return false;
        }
        running.requests += 1;
        true
    }

    fn started(&self, number: u64, execution: &Execution) {
        let mut running = crate::sync::lock(&self.running);
        if running.stopped {
            execution.kill();
        }
        running.executions.insert(number, execution.clone());
    }

    fn done(&self, number: u64) {
        let mut running = crate::sync::lock(&self.running);
        running.executions.remove(&number);
        running.requests -= 1;
        drop(running);
        self.changed.notify_all();
    }

    /// Ends every command running and refuses new seats.
    fn stop(&self) {
        let mut running = crate::sync::lock(&self.running);
        running.stopped = true;
        for execution in running.executions.values() {
            execution.kill();
        }
        drop(running);
        self.changed.notify_all();
    }

    fn stopped(&self) -> bool {
        crate::sync::lock(&self.running).stopped
    }
}

/// Writes each result as it comes; on a write error, stops the stream.
fn write_results(results: mpsc::Receiver<NormalizedResult>, in_flight: &InFlight) -> i32 {
    let mut out = std::io::stdout().lock();
    for result in results {
        if let Err(err) = out.write_all(&result.to_line()).and_then(|()| out.flush()) {
            in_flight.stop();
            return crate::stdio::exit_code_for_stdout_error(&err);
        }
    }
    exit_code::SUCCESS
}

/// One line of input, without its line break: `Ok(None)` at the end,
/// `Err(())` when it is longer than a request may be (the rest of it is
/// read and dropped, in bounded memory).
fn next_line(input: &mut impl BufRead) -> std::io::Result<Option<Result<Vec<u8>, ()>>> {
    let mut line = Vec::new();
    let read = input
        .by_ref()
        .take(MAX_REQUEST_BYTES)
        .read_until(b'\n', &mut line)?;
    if read == 0 {
        return Ok(None);
    }
    if line.last() == Some(&b'\n') || (line.len() as u64) < MAX_REQUEST_BYTES {
        return Ok(Some(Ok(line)));
    }
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(at) => {
                input.consume(at + 1);
                break;
            }
            None => {
                let n = buf.len();
                input.consume(n);
            }
        }
    }
    Ok(Some(Err(())))
}

/// `agent-reach exec --jsonl`.
pub(crate) fn main(ctx: &ProcessContext) -> i32 {
    let (_entry, ctx) = match session_context(ctx) {
        Ok(ready) => ready,
        Err(err) => {
            eprintln!("agent-reach: {err}");
            return exit_code::INTERNAL;
        }
    };
    let ctx = Arc::new(ctx);
    let in_flight = Arc::new(InFlight::default());
    let (sender, results) = mpsc::channel::<NormalizedResult>();
    let writer = {
        let in_flight = Arc::clone(&in_flight);
        std::thread::spawn(move || write_results(results, &in_flight))
    };
    let limit = max_in_flight();
    let mut input = std::io::stdin().lock();
    let mut workers = Vec::new();
    let mut number = 0u64;
    while !in_flight.stopped() {
        let line = match next_line(&mut input) {
            Ok(None) => break,
            Ok(Some(Ok(line))) => line,
            Ok(Some(Err(()))) => {
                let message = format!("the request is larger than {MAX_REQUEST_BYTES} bytes");
                let _ = sender.send(malformed(None, message));
                continue;
            }
            Err(err) => {
                eprintln!("agent-reach: cannot read stdin: {err}");
                break;
            }
        };
        let text = String::from_utf8_lossy(&line).trim().to_owned();
        if text.is_empty() {
            continue;
        }
        if !in_flight.take_seat(limit) {
            break;
        }
        number += 1;
        let (ctx, in_flight, sender) = (Arc::clone(&ctx), Arc::clone(&in_flight), sender.clone());
        workers.push(std::thread::spawn(move || {
            let result = answer(&text, &ctx, |execution| {
                in_flight.started(number, execution)
            });
            in_flight.done(number);
            let _ = sender.send(result);
        }));
        workers.retain(|worker| !worker.is_finished());
    }
    for worker in workers {
        let _ = worker.join();
    }
    drop(sender);
    writer.join().unwrap_or(exit_code::INTERNAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_whole_and_an_over_long_one_is_dropped_to_its_end() {
        let mut text = b"{\"a\":1}\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', MAX_REQUEST_BYTES as usize + 10));
        text.extend(b"\n{\"b\":2}");
        let mut input = std::io::Cursor::new(text);
        assert_eq!(
            next_line(&mut input).unwrap(),
            Some(Ok(b"{\"a\":1}\n".to_vec()))
        );
        assert_eq!(next_line(&mut input).unwrap(), Some(Err(())));
        assert_eq!(
            next_line(&mut input).unwrap(),
            Some(Ok(b"{\"b\":2}".to_vec()))
        );
        assert_eq!(next_line(&mut input).unwrap(), None);
    }

    #[test]
    fn a_stopped_stream_refuses_seats_and_frees_waiters() {
        let in_flight = Arc::new(InFlight::default());
        assert!(in_flight.take_seat(1));
        let waiting = {
            let in_flight = Arc::clone(&in_flight);
            std::thread::spawn(move || in_flight.take_seat(1))
        };
        in_flight.stop();
        assert!(!waiting.join().unwrap());
        assert!(!in_flight.take_seat(1));
    }
}
