//! The control plane and operator CLI, end to end: real binary, real server, real SQLite.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{Env, PASSWORD, http};

#[test]
fn first_admin_login_whoami_logout_and_revoked_token() {
    let env = Env::new();
    let server = env.bootstrap();
    let login_file = env.config_home().join("yy/login.json");
    let mode = std::fs::metadata(&login_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "login file must be private");
    let token = env.stored_token();
    assert!(token.starts_with("yyat_"));

    let me = env.run(&["whoami", "--json"]);
    me.ok();
    assert_eq!(me.json()["account"]["username"], "root");
    assert_eq!(me.json()["account"]["admin"], true);

    // The environment overrides the stored login.
    let other = Env::new();
    let out = other.run_with(
        &["whoami"],
        "",
        &[("YY_SERVER", &server.url), ("YY_TOKEN", &token)],
    );
    out.ok();
    assert!(out.stdout.contains("root"));

    env.run(&["logout"]).ok();
    assert!(!login_file.exists(), "logout forgets the token");
    env.run(&["whoami"]).fails(4, "not logged in");
    // The revoked token is refused by the server too.
    other
        .run_with(
            &["source", "list"],
            "",
            &[("YY_SERVER", &server.url), ("YY_TOKEN", &token)],
        )
        .fails(4, "invalid or was revoked");
    assert!(!server.log().contains(&token), "tokens never reach the log");
}

#[test]
fn wrong_password_and_unknown_user_are_refused_alike() {
    let env = Env::new();
    env.create_admin("root");
    let server = env.serve();
    for user in ["root", "nobody"] {
        env.run_with(
            &["login", &server.url, "--username", user, "--password-stdin"],
            "wrong password",
            &[],
        )
        .fails(4, "wrong username or password");
    }
    assert!(!env.config_home().join("yy/login.json").exists());
    // Without a terminal and without --password-stdin there is nothing to prompt on.
    env.run(&["login", &server.url, "--username", "root"])
        .fails(2, "--password-stdin");
    assert!(!server.log().contains("wrong password"));
    // A URL without its scheme: the example is yy's own address, not Hermes's.
    env.run(&["login", "localhost:8420", "--username", "root"])
        .fails(
            2,
            "is not an http:// or https:// URL such as http://127.0.0.1:8420",
        );
}

#[test]
fn first_admin_is_made_once_and_passwords_are_checked() {
    let env = Env::new();
    env.create_admin("root");
    let data = env.data_dir();
    let data = data.to_str().unwrap();
    env.run_with(
        &[
            "admin",
            "create",
            "--data-dir",
            data,
            "--username",
            "root",
            "--password-stdin",
        ],
        PASSWORD,
        &[],
    )
    .fails(6, "already exists");
    env.run_with(
        &[
            "admin",
            "create",
            "--data-dir",
            data,
            "--username",
            "x",
            "--password-stdin",
        ],
        "short",
        &[],
    )
    .fails(2, "too short");
    env.run_with(
        &[
            "admin",
            "create",
            "--data-dir",
            data,
            "--username",
            "bad name",
            "--password-stdin",
        ],
        PASSWORD,
        &[],
    )
    .fails(2, "invalid account name");
    if env.on_postgres() {
        // The data directory holds no database then; yy serve makes it.
        return;
    }
    let mode = std::fs::metadata(env.data_dir())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "the data directory is private");
}

#[test]
fn non_admin_accounts_cannot_administer() {
    let env = Env::new();
    let server = env.bootstrap();
    env.run_with(
        &["account", "create", "alice", "--password-stdin"],
        PASSWORD,
        &[],
    )
    .ok();
    let alice = Env::new();
    alice.login(&server, "alice");
    let me = alice.run(&["whoami", "--json"]);
    me.ok();
    assert_eq!(me.json()["account"]["admin"], false);
    alice
        .run(&["source", "create", "s1"])
        .fails(4, "not an admin");
    alice.run(&["account", "list"]).fails(4, "not an admin");
    alice.run(&["runner", "list"]).fails(4, "not an admin");
    let sources = env.run(&["source", "list", "--json"]);
    assert_eq!(sources.json().as_array().unwrap().len(), 0);
}

fn setup_catalog(env: &Env) {
    env.run(&["source", "create", "main"]).ok();
    env.run(&["profile", "create", "default", "--cwd", "/workspace"])
        .ok();
}

#[test]
fn agents_are_limited_to_100_per_account_also_under_concurrency() {
    let env = Env::new();
    let server = env.bootstrap();
    setup_catalog(&env);
    let token = env.stored_token();
    let addr = server.addr();
    // 4 creators race for 120 names; exactly 100 may win.
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let addr = addr.clone();
            let token = token.clone();
            std::thread::spawn(move || {
                let mut created = 0;
                let mut refused = 0;
                for i in 0..30 {
                    let body = format!(r#"{{"name":"a{t}-{i}","profile":"default","env":"host"}}"#);
                    let (status, text) = http(
                        &addr,
                        "POST",
                        "/api/v1/agents",
                        &[
                            ("Authorization", &format!("Bearer {token}")),
                            ("Content-Type", "application/json"),
                        ],
                        &body,
                    )
                    .unwrap();
                    match status {
                        200 => created += 1,
                        409 => {
                            assert!(text.contains("limit_reached"), "{text}");
                            refused += 1
                        }
                        other => panic!("unexpected {other}: {text}"),
                    }
                }
                (created, refused)
            })
        })
        .collect();
    let (created, refused) = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert_eq!((created, refused), (100, 20));
    let list = env.run(&["agent", "list", "--json"]);
    assert_eq!(list.json().as_array().unwrap().len(), 100);

    env.run(&[
        "agent",
        "create",
        "one-more",
        "--profile",
        "default",
        "--env",
        "host",
    ])
    .fails(6, "100 active agents");
    // Archiving frees a slot.
    env.run(&["agent", "archive", "a0-0"]).ok();
    env.run(&[
        "agent",
        "create",
        "one-more",
        "--profile",
        "default",
        "--env",
        "host",
    ])
    .ok();
    env.run(&[
        "agent",
        "create",
        "two-more",
        "--profile",
        "default",
        "--env",
        "host",
    ])
    .fails(6, "limit");
}

#[test]
fn computer_agents_need_an_absolute_profile_cwd() {
    let env = Env::new();
    let _server = env.bootstrap();
    env.run(&["source", "create", "main"]).ok();
    env.run(&["profile", "create", "hostonly", "--cwd", "auto"])
        .ok();
    env.run(&["profile", "create", "rel", "--cwd", "work/dir"])
        .fails(2, "absolute");
    env.run(&[
        "agent",
        "create",
        "c1",
        "--profile",
        "hostonly",
        "--env",
        "computer",
    ])
    .fails(2, "absolute guest path");
    env.run(&[
        "agent",
        "create",
        "h1",
        "--profile",
        "hostonly",
        "--env",
        "host",
    ])
    .ok();
    env.run(&["profile", "update", "hostonly", "--cwd", "/home/yy/work"])
        .ok();
    env.run(&[
        "agent",
        "create",
        "c1",
        "--profile",
        "hostonly",
        "--env",
        "computer",
    ])
    .ok();
    // A profile in use by a computer agent cannot go back to a relative cwd.
    env.run(&["profile", "update", "hostonly", "--cwd", "."])
        .fails(2, "computer agents");
    let shown = env.run(&["agent", "show", "c1", "--json"]);
    assert_eq!(shown.json()["env"], "computer");
    assert_eq!(shown.json()["source"], "main");
}

#[test]
fn runner_registration_writes_a_private_file_and_never_shows_the_token() {
    let env = Env::new();
    let server = env.bootstrap();
    setup_catalog(&env);
    let file = env.path("runner.json");
    let f = file.to_str().unwrap();
    env.run(&[
        "runner",
        "register",
        "--source",
        "main",
        "--profile",
        "default",
        "--server-url",
        &server.url,
        "--artifact-root",
        "/srv/artifacts",
        "-o",
        f,
    ])
    .ok();
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(config["protocol"], 1);
    assert_eq!(config["serverURL"], server.url.as_str());
    assert_eq!(config["hermesURL"], "http://127.0.0.1:9119");
    assert_eq!(config["allowedProfiles"], serde_json::json!(["default"]));
    assert_eq!(
        config["artifactRoots"],
        serde_json::json!(["/srv/artifacts"])
    );
    let token = config["token"].as_str().unwrap().to_string();
    let id = config["runnerId"].as_str().unwrap().to_string();
    assert!(token.starts_with("yyrt_"));

    for args in [
        vec!["runner", "list"],
        vec!["runner", "list", "--json"],
        vec!["runner", "show", &id],
        vec!["runner", "show", &id, "--json"],
        vec!["runner", "show", &id[..8]],
    ] {
        let out = env.run(&args);
        out.ok();
        assert!(out.stdout.contains(&id), "{args:?}");
        assert!(!out.stdout.contains(&token), "{args:?} leaks the token");
    }
    let auth = format!("Bearer {}", env.stored_token());
    let (_, raw) = http(
        &server.addr(),
        "GET",
        "/api/v1/runners",
        &[("Authorization", &auth)],
        "",
    )
    .unwrap();
    assert!(raw.contains(&id) && !raw.contains(&token));
    assert!(
        !server.log().contains(&token),
        "the token never reaches the log"
    );

    // An existing file is never overwritten by accident, and nothing is registered then.
    env.run(&[
        "runner",
        "register",
        "--source",
        "main",
        "--profile",
        "default",
        "-o",
        f,
    ])
    .fails(2, "already exists");
    // One enabled Runner per source.
    let second = env.path("second.json");
    env.run(&[
        "runner",
        "register",
        "--source",
        "main",
        "--profile",
        "default",
        "-o",
        second.to_str().unwrap(),
    ])
    .fails(6, "disable it first");
    assert!(!second.exists());
    let list = env.run(&["runner", "list", "--json"]);
    assert_eq!(list.json().as_array().unwrap().len(), 1);

    // After disabling, a new registration for the source is allowed.
    env.run(&["runner", "disable", &id]).fails(2, "--yes");
    let disabled = env.run(&["runner", "disable", &id, "--yes", "--json"]);
    disabled.ok();
    assert_eq!(disabled.json()["state"], "disabled");
    env.run(&[
        "runner",
        "register",
        "--source",
        "main",
        "--profile",
        "default",
        "-o",
        second.to_str().unwrap(),
    ])
    .ok();
    // Unknown profiles and sources are refused before anything is written.
    let third = env.path("third.json");
    env.run(&[
        "runner",
        "register",
        "--source",
        "nope",
        "--profile",
        "default",
        "-o",
        third.to_str().unwrap(),
    ])
    .fails(5, "no source named");
    assert!(!third.exists());
}

#[test]
fn bad_input_gets_clear_errors_and_changes_nothing() {
    let env = Env::new();
    let server = env.bootstrap();
    setup_catalog(&env);
    let auth = format!("Bearer {}", env.stored_token());
    let json = ("Content-Type", "application/json");
    let addr = server.addr();
    let post = |path: &str, body: &str| {
        http(&addr, "POST", path, &[("Authorization", &auth), json], body).unwrap()
    };

    let (status, body) = post("/api/v1/sources", "{not json");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("\"malformed_body\""), "{body}");

    let (status, body) = post("/api/v1/sources", r#"{"name":"x","colour":"red"}"#);
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("unknown field `colour`"), "{body}");

    let big = format!(r#"{{"name":"x","description":"{}"}}"#, "a".repeat(2 << 20));
    let (status, body) = post("/api/v1/sources", &big);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("payload_too_large"), "{body}");

    let (status, body) = http(
        &addr,
        "POST",
        "/api/v1/sources",
        &[("Authorization", &auth)],
        r#"{"name":"x"}"#,
    )
    .unwrap();
    assert_eq!(status, 415, "{body}");

    let (status, body) = post("/api/v1/sources", r#"{"name":"../etc"}"#);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid source name"), "{body}");

    let (status, body) = http(
        &addr,
        "GET",
        "/api/v1/nothing-here",
        &[("Authorization", &auth)],
        "",
    )
    .unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("\"not_found\""), "{body}");

    let (status, _) = http(&addr, "GET", "/api/v1/sources", &[], "").unwrap();
    assert_eq!(status, 401);

    env.run(&["source", "create", "bad name"])
        .fails(2, "invalid source name");
    env.run(&["agent", "show", "ghost"])
        .fails(5, "no agent named");
    env.run(&["profile", "show", "ghost"])
        .fails(5, "no profile named");
    env.run(&["runner", "show", "0000dead"])
        .fails(5, "no runner");
    env.run(&["source", "create", "main"])
        .fails(6, "already exists");
    env.run(&[
        "agent",
        "create",
        "x",
        "--profile",
        "ghost",
        "--env",
        "host",
    ])
    .fails(5, "no profile named");
    // Argument errors come from clap, with its usage hint after the first line.
    let out = env.run(&[
        "agent",
        "create",
        "x",
        "--profile",
        "default",
        "--env",
        "vm",
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr
            .starts_with("error: invalid value 'vm' for '--env"),
        "{out:?}"
    );

    let sources = env.run(&["source", "list", "--json"]);
    let names: Vec<_> = sources
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(
        names,
        vec![serde_json::json!("main")],
        "nothing was created"
    );
    assert_eq!(
        env.run(&["agent", "list", "--json"]).json(),
        serde_json::json!([])
    );

    // A server that is not there is a failure with a clear message.
    let ghost = Env::new();
    ghost
        .run_with(
            &["source", "list"],
            "",
            &[("YY_SERVER", "http://127.0.0.1:9"), ("YY_TOKEN", "yyat_x")],
        )
        .fails(1, "cannot reach the yy server");
}

#[test]
fn restart_keeps_every_record_and_sigterm_exits_zero() {
    let env = Env::new();
    let server = env.bootstrap();
    setup_catalog(&env);
    env.run(&[
        "agent",
        "create",
        "bob",
        "--profile",
        "default",
        "--env",
        "computer",
        "--manage-team",
    ])
    .ok();
    let file = env.path("runner.json");
    env.run(&[
        "runner",
        "register",
        "--source",
        "main",
        "--profile",
        "default",
        "-o",
        file.to_str().unwrap(),
    ])
    .ok();
    let before: Vec<String> = ["source", "profile", "agent", "runner"]
        .iter()
        .map(|noun| env.run(&[noun, "list", "--json"]).stdout)
        .collect();
    assert_eq!(server.terminate(), 0, "SIGTERM is a clean exit");

    let server = env.serve();
    // The stored login still works against the same address? The port changed, so use
    // the environment to point the old token at the new server.
    let token = env.stored_token();
    let envs = [
        ("YY_SERVER", server.url.as_str()),
        ("YY_TOKEN", token.as_str()),
    ];
    let after: Vec<String> = ["source", "profile", "agent", "runner"]
        .iter()
        .map(|noun| env.run_with(&[noun, "list", "--json"], "", &envs).stdout)
        .collect();
    // Runner "online"/"last seen" may differ in principle; here nothing connected.
    assert_eq!(before, after);
    let bob = env.run_with(&["agent", "show", "bob", "--json"], "", &envs);
    assert_eq!(bob.json()["manage_team"], true);
}

#[test]
fn a_database_from_a_newer_yy_is_refused() {
    let env = Env::new();
    env.create_admin("root");
    let db = env.data_dir().join("yy.db");
    let (set, get) = if env.on_postgres() {
        (
            "UPDATE schema_version SET version = 999",
            "SELECT version FROM schema_version",
        )
    } else {
        ("PRAGMA user_version = 999", "PRAGMA user_version")
    };
    env.sql(set);
    let out = env.run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        env.data_dir().to_str().unwrap(),
    ]);
    out.fails(1, "newer yy");
    assert!(out.stderr.contains("schema version 999"), "{out:?}");
    assert!(out.stdout.is_empty(), "nothing listened");
    assert_eq!(
        env.sql_number(get),
        999,
        "the newer database is left untouched"
    );
    assert_eq!(db.exists(), !env.on_postgres());
}

#[test]
fn a_closed_stdout_pipe_exits_quietly() {
    let env = Env::new();
    let server = env.bootstrap();
    setup_catalog(&env);
    for i in 0..60 {
        env.run(&[
            "agent",
            "create",
            &format!("agent-{i}"),
            "--profile",
            "default",
            "--env",
            "host",
        ])
        .ok();
    }
    let token = env.stored_token();
    for args in [vec!["agent", "list"], vec!["completions", "bash"]] {
        let mut child = env
            .command(&args)
            .env("YY_SERVER", &server.url)
            .env("YY_TOKEN", &token)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // like `| head -0`
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(
            out.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn usage_errors_exit_2() {
    let env = Env::new();
    let out = env.run(&["agent", "create"]);
    assert_eq!(out.code, 2, "{out:?}");
    let out = env.run(&["no-such-command"]);
    assert_eq!(out.code, 2, "{out:?}");
    let out = env.run(&["--help"]);
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("Exit codes"));
}

#[test]
fn shell_completion_offers_the_servers_agent_names() {
    let env = Env::new();
    let _server = env.bootstrap();
    env.run(&["source", "create", "main"]).ok();
    env.run(&["profile", "create", "default", "--cwd", "/workspace"])
        .ok();
    for name in ["helper", "hacker", "other"] {
        env.run(&[
            "agent",
            "create",
            name,
            "--profile",
            "default",
            "--env",
            "host",
        ])
        .ok();
    }
    // What bash does at `yy chat h<TAB>`: the registration script `yy completions bash`
    // prints, its function, and the yy on PATH answering.
    let script = env.run(&["completions", "bash"]);
    script.ok();
    let bin_dir = std::path::Path::new(common::BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script_file = env.path("yy.bash");
    std::fs::write(&script_file, &script.stdout).unwrap();
    let complete = |line: &[&str]| {
        let words = line
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" ");
        let program = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD={}; COMP_TYPE=9; \
             _clap_complete_yy yy '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script_file.display(),
            line.len() - 1,
            line[line.len() - 1],
            line[line.len() - 2],
        );
        let out = std::process::Command::new("bash")
            .args(["--norc", "-c", &program])
            .env_clear()
            .env("PATH", &path)
            .env("HOME", env.path(""))
            .env("XDG_CONFIG_HOME", env.config_home())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let mut got: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty() && !l.starts_with('-'))
            .collect();
        got.sort();
        got
    };
    assert_eq!(complete(&["yy", "chat", "h"]), ["hacker", "helper"]);
    assert_eq!(
        complete(&["yy", "agent", "show", ""]),
        ["hacker", "helper", "other"]
    );
    assert_eq!(
        complete(&["yy", "computer", "create", "--agent", "o"]),
        ["other"]
    );
    // Subcommands complete from the definitions, the ls alias too.
    assert!(complete(&["yy", "sess"]).contains(&"session".to_string()));
}

/// `yy serve` on a terminal (a pseudo-terminal from script(1)) for a moment: what it wrote.
fn serve_on_a_terminal(env: &Env, no_color: bool) -> String {
    let data = env.path(if no_color {
        "data-plain"
    } else {
        "data-colour"
    });
    let line = format!(
        "timeout -s TERM 3 {} serve --listen 127.0.0.1:0 --data-dir {}",
        common::BIN,
        data.display()
    );
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-qfec", &line, "/dev/null"])
        .env("YY_LOG", "info")
        .env("TERM", "xterm-256color")
        .env_remove("NO_COLOR");
    if no_color {
        cmd.env("NO_COLOR", "1");
    }
    let out = cmd.output().expect("script(1) from util-linux");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn no_color_keeps_escape_codes_out_of_the_logs_even_on_a_terminal() {
    let env = Env::new();
    let coloured = serve_on_a_terminal(&env, false);
    assert!(coloured.contains("listening on"), "{coloured}");
    // The control: on a terminal, logs are coloured...
    assert!(coloured.contains('\u{1b}'), "{coloured:?}");
    // ... and with NO_COLOR they are not.
    let plain = serve_on_a_terminal(&env, true);
    assert!(plain.contains("listening on"), "{plain}");
    assert!(!plain.contains('\u{1b}'), "{plain:?}");
}

#[test]
fn a_server_without_a_login_says_so_and_typos_get_only_close_suggestions() {
    let env = Env::new();
    let server = env.bootstrap();
    // A server named by YY_SERVER that the stored login is not for.
    let out = env.run_with(
        &["agent", "list"],
        "",
        &[("YY_SERVER", "http://127.0.0.1:9")],
    );
    out.fails(4, "no login for http://127.0.0.1:9 (from YY_SERVER)");
    assert!(
        out.stderr
            .contains(&format!("the stored login is for {}", server.url)),
        "{out:?}"
    );
    // --server only where a server is talked to.
    let out = env.run(&["image", "list", "--server", &server.url]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("unexpected argument '--server'"),
        "{out:?}"
    );
    env.run(&["agent", "ls", "--server", &server.url]).ok();
    // A slip of the fingers is suggested; a word that merely looks alike is not.
    let out = env.run(&["agnet"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("unrecognized subcommand 'agnet'"),
        "{out:?}"
    );
    assert!(out.stderr.contains("'agent'"), "{out:?}");
    assert!(!out.stderr.contains("guest"), "{out:?}");
}

#[test]
fn a_second_serve_on_one_data_directory_is_refused_naming_the_first() {
    let env = Env::new();
    let server = env.bootstrap();
    let data = env.data_dir();
    let out = env.run(&[
        "serve",
        "--data-dir",
        data.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(out.code, 6, "{out:?}");
    assert!(
        out.stderr.contains(&format!("pid {}", server.child.id())),
        "it names the running one's pid: {out:?}"
    );
    assert!(
        out.stderr
            .contains(&format!("listening on http://{}", server.addr())),
        "and its address: {out:?}"
    );
    assert_eq!(out.stderr.trim().lines().count(), 1, "one line: {out:?}");
    // The first goes on serving; once it stopped, the directory is free again.
    env.run(&["whoami"]).ok();
    assert_eq!(server.terminate(), 0);
    let again = common::Server::start(&env, &data);
    drop(again);
}
