//! The operator's knobs as a user of `exec` meets them: children get a
//! UTF-8 locale whatever ours says.

use serde_json::json;

use crate::common::TestEnv;

const CHARMAP: &str = "[[tools]]\nname = \"charmap\"\ncommand = [\"locale\", \"charmap\"]\ncwd = \"project_root\"\nrisk = \"low\"\n";

fn charmap(env: &TestEnv, registry: &str, vars: &[(&str, &str)]) -> String {
    let config = env.write("registry.toml", registry);
    let mut cmd = env
        .cmd()
        .args(["exec", "--json", "--config"])
        .arg(&config)
        .stdin(json!({"tool": "charmap"}).to_string());
    for (name, value) in vars {
        cmd = cmd.env(name, value);
    }
    let run = cmd.run();
    run.success();
    run.json()["stdout"].as_str().unwrap().trim().to_owned()
}

#[test]
fn children_get_utf8_when_started_with_lang_c_or_lc_all_posix() {
    let env = TestEnv::new();
    assert_eq!(charmap(&env, CHARMAP, &[("LANG", "C")]), "UTF-8");
    assert_eq!(
        charmap(&env, CHARMAP, &[("LANG", "C.UTF-8"), ("LC_ALL", "POSIX")]),
        "UTF-8"
    );
}

#[test]
fn the_registrys_env_may_still_choose_another_locale() {
    let env = TestEnv::new();
    let registry = format!("[env]\nLC_ALL = \"POSIX\"\n{CHARMAP}");
    assert_eq!(charmap(&env, &registry, &[("LANG", "C")]), "ANSI_X3.4-1968");
}
