//! The `agent-reach` executable. Everything lives in the library: `main` only
//! hands the process over to the argv[0] dispatch in [`agent_reach::dispatch`].

fn main() -> std::process::ExitCode {
    let code = agent_reach::dispatch::process_main();
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}
