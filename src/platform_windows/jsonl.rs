//! `agent-reach exec --jsonl` on Windows: one request per line on stdin,
//! run concurrently, each result one line on stdout as it finishes (its
//! request's `id` echoed), as on Linux. A malformed or over-long line gets
//! a `rejected` result and the stream goes on; at the end of the input the
//! requests in flight finish, then it exits 0.
//!
//! Windows has no scheduler yet, so the stream bounds itself: at most
//! [`crate::exec::default_global_limit`] commands run at once (the
//! scheduler's default) and the next line is not read until one ends; the
//! client's writes wait meanwhile (back-pressure, where Linux answers
//! `busy`). When stdout is gone (the reader left), the commands running
//! are ended and nothing more is read.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};

use super::engine::Execution;
use super::operator::Operator;
use super::path_entry::session_context;
use super::run::{ExecArgs, MAX_REQUEST_BYTES, answer, malformed};
use crate::context::ProcessContext;
use crate::exit_code;
use crate::result::NormalizedResult;

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
pub(crate) fn main(args: &ExecArgs, ctx: &ProcessContext) -> i32 {
    let (_entry, ctx) = match session_context(ctx) {
        Ok(ready) => ready,
        Err(err) => {
            eprintln!("agent-reach: {err}");
            return exit_code::INTERNAL;
        }
    };
    let operator = &match Operator::load(&args.registry, &ctx) {
        Ok(operator) => operator,
        Err(err) => {
            eprintln!("agent-reach: {err}");
            return err.code;
        }
    };
    let ctx = operator.child_context(&ctx);
    let (ctx, in_flight) = (&ctx, &InFlight::default());
    let limit = crate::exec::default_global_limit();
    let (sender, results) = mpsc::channel::<NormalizedResult>();
    // Every thread is joined when the scope ends: the requests in flight
    // finish, then the writer (its channel closes with the last sender).
    std::thread::scope(|scope| {
        let writer = scope.spawn(move || write_results(results, in_flight));
        let mut input = std::io::stdin().lock();
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
            let sender = sender.clone();
            scope.spawn(move || {
                let result = answer(&text, ctx, operator, |execution| {
                    in_flight.started(number, execution)
                });
                in_flight.done(number);
                let _ = sender.send(result);
            });
        }
        drop(sender);
        writer.join().unwrap_or(exit_code::INTERNAL)
    })
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
        let in_flight = InFlight::default();
        assert!(in_flight.take_seat(1));
        std::thread::scope(|scope| {
            let waiting = scope.spawn(|| in_flight.take_seat(1));
            in_flight.stop();
            assert!(!waiting.join().unwrap());
        });
        assert!(!in_flight.take_seat(1));
    }
}
