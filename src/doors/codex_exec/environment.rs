//! `initialize` and `environment/info`: what Codex learns of this
//! environment, honestly. The shell is the server's (`$SHELL` when it is
//! bash, zsh or sh, else `/bin/bash`, else `/bin/sh`); the working
//! directory is `--root`, since every path beneath it is all Codex reaches;
//! the capabilities are all `false` (each would make Codex send requests
//! this door does not serve).

use std::path::Path;

use serde_json::Value;

use super::connection::{Connection, params, to_value};
use super::protocol::{
    EnvironmentCapabilities, EnvironmentInfo, InitializeParams, InitializeResponse, RpcError,
    ShellInfo,
};
use super::uri;
use crate::broker::Broker;

/// The shells Codex knows by name.
const KNOWN_SHELLS: &[&str] = &["bash", "zsh", "sh"];
/// The shells tried when `$SHELL` is not one of them.
const FALLBACK_SHELLS: &[&str] = &["/bin/bash", "/bin/sh"];
/// The temporary directory when `$TMPDIR` is not set.
const DEFAULT_TMP: &str = "/tmp";

/// `initialize`: the session id and the environment.
pub(crate) fn initialize(conn: &Connection, raw: Value) -> Result<Value, RpcError> {
    let init: InitializeParams = params(raw)?;
    tracing::info!(
        client = %init.client_name,
        resume = ?init.resume_session_id,
        session = %conn.session_id,
        "codex-exec client initialized"
    );
    to_value(&InitializeResponse {
        session_id: conn.session_id.clone(),
        environment_info: info(&conn.broker),
    })
}

/// `environment/info`.
pub(crate) fn info(broker: &Broker) -> EnvironmentInfo {
    let env = broker.server_env();
    let var = |name: &str| {
        env.get(std::ffi::OsStr::new(name))
            .and_then(|v| v.to_str())
            .filter(|v| v.starts_with('/'))
            .map(str::to_owned)
    };
    let temp = var("TMPDIR").unwrap_or_else(|| DEFAULT_TMP.to_owned());
    EnvironmentInfo {
        shell: shell(var("SHELL").as_deref()),
        executor_version: super::CODEX_VERSION.to_owned(),
        cwd: uri::from_path(broker.root()),
        user_home_dir: var("HOME").map(|h| uri::from_path(Path::new(&h))),
        platform_os: std::env::consts::OS.to_owned(),
        temporary_directories: Vec::new(),
        temp_dir: uri::from_path(Path::new(&temp)),
        capabilities: EnvironmentCapabilities::default(),
    }
}

/// The shell commands are written for.
fn shell(from_env: Option<&str>) -> ShellInfo {
    let named = |path: &str| {
        let name = Path::new(path).file_name()?.to_str()?;
        KNOWN_SHELLS.contains(&name).then(|| ShellInfo {
            name: name.to_owned(),
            path: path.to_owned(),
        })
    };
    from_env
        .into_iter()
        .chain(FALLBACK_SHELLS.iter().copied())
        .filter(|p| Path::new(p).is_file())
        .find_map(named)
        .unwrap_or_else(|| ShellInfo {
            name: "sh".to_owned(),
            path: "sh".to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_is_the_server_s_when_codex_knows_it() {
        let bash = shell(Some("/bin/bash"));
        assert_eq!(
            (bash.name.as_str(), bash.path.as_str()),
            ("bash", "/bin/bash")
        );
        let fallback = shell(Some("/usr/bin/fish"));
        assert!(
            KNOWN_SHELLS.contains(&fallback.name.as_str()),
            "{fallback:?}"
        );
    }

    #[test]
    fn no_capability_is_advertised_that_the_door_does_not_serve() {
        let caps = serde_json::to_value(EnvironmentCapabilities::default()).unwrap();
        assert_eq!(caps["fsWatchMissing"], false);
        assert_eq!(caps["environmentConfigRead"], false);
        assert!(caps.as_object().unwrap().values().all(|v| v == false));
    }
}
