//! An `exec_command` reply of a failed command lists, under `Highlights:`,
//! the failing lines the fold left out of its output (issue 40).

use serde_json::json;

use super::{run, serve};
use crate::suite::highlights::FAILING_BUILD;

#[test]
fn a_failed_command_s_reply_shows_the_error_line_the_fold_left_out() {
    run(async {
        let s = serve().await;
        let (text, v) = s
            .ok(
                "exec_command",
                json!({"cmd": FAILING_BUILD, "yield_time_ms": 20000}),
            )
            .await;
        assert_eq!(v["exit_code"], 1, "{text}");
        let output = v["output"].as_str().unwrap_or_default();
        assert!(output.contains("omitted"), "{text}");
        assert!(!output.contains("error[E0308]"), "{text}");
        assert!(
            text.contains("Highlights:\n  line 8000: error[E0308]: mismatched types\n"),
            "{text}"
        );
        assert_eq!(v["highlights"][0]["line"], 8000, "{v}");
        // The line number is the one the fold marker's spill file has.
        let spill = v["full_output_path"].as_str().unwrap();
        let full = std::fs::read_to_string(spill).unwrap();
        assert_eq!(
            full.lines().nth(7999),
            Some("error[E0308]: mismatched types")
        );
        let (text, _) = s
            .ok("exec_command", json!({"cmd": "echo 'error: fine'"}))
            .await;
        assert!(!text.contains("Highlights:"), "{text}");
        s.close().await;
    });
}
