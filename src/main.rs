//! The `agent-reach` executable. Everything lives in the library: `main` only
//! hands the process over to the argv[0] dispatch in [`agent_reach::dispatch`].

fn main() -> std::process::ExitCode {
    agent_reach::dispatch::main()
}
