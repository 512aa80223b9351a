//! HTTPS across a network: `yy serve` on an address that is not loopback (in a network
//! namespace the test makes), a pinned self-signed certificate, a CA-issued one swapped
//! by SIGHUP under a connected Runner, and logins that refuse to send a password in clear.

mod common;

use std::io::Write;
use std::time::Duration;

use common::netns::{Netns, SERVER_IP};
use common::{Env, PASSWORD, Server, wait_for};

/// A sandbox whose every yy runs in `ns`.
fn env_in(ns: &Netns) -> Env {
    let mut env = Env::new();
    env.netns = Some(ns.name.clone());
    env
}

fn listen() -> String {
    format!("{SERVER_IP}:0")
}

#[test]
fn a_runner_and_the_cli_work_over_https_with_a_pinned_self_signed_certificate() {
    let Some(ns) = Netns::create() else { return };
    let env = env_in(&ns);
    env.create_admin("root");
    let server = Server::start_with(&env, &env.data_dir(), &listen(), &["--tls", "self-signed"]);
    assert!(
        server.url.starts_with(&format!("https://{SERVER_IP}:")),
        "{}",
        server.url
    );
    let pin = server.cert_sha256.clone().unwrap();

    // Without a terminal and without --cert-sha256, login shows the fingerprint and stops
    // before the password is asked for.
    let refused = env.run_with(
        &[
            "login",
            &server.url,
            "--username",
            "root",
            "--password-stdin",
        ],
        PASSWORD,
        &[],
    );
    refused.fails(4, &pin);
    assert!(!env.config_home().join("yy/login.json").exists());
    // A wrong fingerprint is refused with the one presented.
    let wrong = "ab".repeat(32);
    env.run_with(
        &[
            "login",
            &server.url,
            "--username",
            "root",
            "--password-stdin",
            "--cert-sha256",
            &wrong,
        ],
        PASSWORD,
        &[],
    )
    .fails(4, &pin);
    env.login(&server, "root");
    let stored = std::fs::read_to_string(env.config_home().join("yy/login.json")).unwrap();
    assert!(stored.contains(&pin), "{stored}");
    assert_eq!(env.json(&["whoami"])["account"]["username"], "root");

    // The Runner pins what the server presents, and works with it.
    let reg = env.register_runner(&server, "main", &[]);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&reg.config).unwrap()).unwrap();
    assert_eq!(config["serverCertSha256"], pin.as_str());
    assert!(
        config["serverURL"]
            .as_str()
            .unwrap()
            .starts_with("https://")
    );
    let (_runner, _generation) = env.start_online(&reg, "a", 0);
    let ping = env.json(&["runner", "ping", &reg.id]);
    assert_eq!(ping["summary"]["answered"], 1, "{ping}");

    // Token rotation over HTTPS: the Runner renews when asked, keeps its pin, goes on
    // working, and the old token is refused.
    let old_config = env.path("runner-old.json");
    write_private(&old_config, &std::fs::read_to_string(&reg.config).unwrap());
    env.run(&["runner", "rotate-token", &reg.id]).ok();
    wait_for(Duration::from_secs(30), "the renewed token in use", || {
        let now: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&reg.config).unwrap()).unwrap();
        let shown = env.json(&["runner", "show", &reg.id]);
        (now["token"] != config["token"] && shown["token_rotation"].is_null()).then_some(now)
    });
    let renewed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&reg.config).unwrap()).unwrap();
    assert_eq!(renewed["serverCertSha256"], pin.as_str());
    let ping = env.json(&["runner", "ping", &reg.id]);
    assert_eq!(ping["summary"]["answered"], 1, "{ping}");
    let doctor = env.run(&[
        "doctor",
        "--runner-config",
        old_config.to_str().unwrap(),
        "--json",
    ]);
    let report = doctor.json();
    let token = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "runner.token")
        .unwrap();
    assert_eq!(token["outcome"], "fail", "{report:#}");
    assert!(token["detail"].to_string().contains("401"), "{token:#}");

    // A changed certificate is refused with the old and the new fingerprint and how to
    // accept the new one.
    let out = env.run_with(&["whoami"], "", &[("YY_CERT_SHA256", &wrong)]);
    out.fails(4, "changed");
    assert!(
        out.stderr.contains(&pin) && out.stderr.contains(&wrong),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("--cert-sha256"), "{}", out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);

    // A Runner pinned to another certificate never connects, and says why.
    let mut bad = config.clone();
    bad["serverCertSha256"] = wrong.clone().into();
    let bad_path = env.path("runner-wrong-pin.json");
    write_private(&bad_path, &bad.to_string());
    let bad_reg = common::Registered {
        config: bad_path,
        id: reg.id.clone(),
        token: reg.token.clone(),
    };
    let runner = env.start_runner(&bad_reg, "b");
    wait_for(
        Duration::from_secs(15),
        "the refusal in the Runner's log",
        || {
            let log = std::fs::read_to_string(&runner.log).unwrap_or_default();
            log.contains("not the pinned").then_some(())
        },
    );
    let log = std::fs::read_to_string(&runner.log).unwrap();
    assert!(!log.contains("connected"), "{log}");
}

#[test]
fn sighup_swaps_the_certificate_while_a_runner_stays_connected() {
    let Some(ns) = Netns::create() else { return };
    let mut env = env_in(&ns);
    let ca = Ca::new();
    let ca_file = env.path("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    // The Runner and the CLI trust this CA (as they would a public one).
    env.envs
        .push(("SSL_CERT_FILE".into(), ca_file.display().to_string()));
    let cert = env.path("server.crt");
    let key = env.path("server.key");
    let first = ca.issue(SERVER_IP, &cert, &key);
    env.create_admin("root");
    let server = Server::start_with(
        &env,
        &env.data_dir(),
        &listen(),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(server.cert_sha256.as_deref(), Some(first.as_str()));
    env.login(&server, "root");
    let reg = env.register_runner(&server, "main", &[]);
    let (runner, generation) = env.start_online(&reg, "a", 0);

    let second = ca.issue(SERVER_IP, &cert, &key);
    assert_ne!(first, second);
    unsafe {
        libc::kill(server.child.id() as i32, libc::SIGHUP);
    }
    wait_for(Duration::from_secs(10), "the reload in the log", || {
        server.log().contains("certificate reloaded").then_some(())
    });
    // New connections get the new certificate: pinning the old one now fails, naming it.
    env.run_with(
        &[
            "login",
            &server.url,
            "--username",
            "root",
            "--password-stdin",
            "--cert-sha256",
            &"00".repeat(32),
        ],
        PASSWORD,
        &[("SSL_CERT_FILE", "/nonexistent")],
    )
    .fails(4, &second);
    // The Runner never reconnected, and its queue still works.
    let ping = env.json(&["runner", "ping", &reg.id, "-c", "3"]);
    assert_eq!(ping["summary"]["answered"], 3, "{ping}");
    let shown = env.json(&["runner", "show", &reg.id]);
    assert_eq!(shown["generation"].as_i64(), Some(generation), "{shown}");
    assert_eq!(shown["online"], true);
    // A broken file on the next SIGHUP keeps the certificate in use.
    std::fs::write(&cert, "garbage").unwrap();
    unsafe {
        libc::kill(server.child.id() as i32, libc::SIGHUP);
    }
    wait_for(
        Duration::from_secs(10),
        "the failed reload in the log",
        || {
            server
                .log()
                .contains("certificate not reloaded")
                .then_some(())
        },
    );
    env.json(&["runner", "ping", &reg.id]);
    drop(runner);
}

#[test]
fn login_over_plain_http_to_another_address_sends_nothing() {
    let Some(ns) = Netns::create() else { return };
    let env = env_in(&ns);
    // A listener on the namespace's address that records every byte it receives.
    let received = env.path("received");
    let script = format!(
        "import socket,sys\n\
         s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('{SERVER_IP}', 0)); s.listen(8)\n\
         print(s.getsockname()[1], flush=True)\n\
         s.settimeout(30)\n\
         while True:\n\
         \x20   c,_=s.accept(); c.settimeout(5)\n\
         \x20   open(sys.argv[1],'ab').write(b'connected '+c.recv(65536)+b'\\n')\n"
    );
    let mut listener = ns
        .command("python3")
        .args(["-c", &script, received.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(listener.stdout.take().unwrap()),
        &mut port,
    )
    .unwrap();
    let url = format!("http://{SERVER_IP}:{}", port.trim());
    let out = env.run_with(
        &["login", &url, "--username", "root", "--password-stdin"],
        PASSWORD,
        &[],
    );
    out.fails(2, "not loopback");
    assert!(out.stderr.contains("https://"), "{}", out.stderr);
    // A probe connects after the CLI ended: the listener takes connections in the order
    // they came, so one the CLI made would be recorded before the probe's.
    ns.command("python3")
        .args([
            "-c",
            "import socket,sys; c=socket.create_connection((sys.argv[1], int(sys.argv[2]))); c.sendall(b'probe'); c.close()",
            SERVER_IP,
            port.trim(),
        ])
        .status()
        .unwrap();
    let recorded = wait_for(Duration::from_secs(10), "the probe recorded", || {
        let text = std::fs::read_to_string(&received).unwrap_or_default();
        text.contains("probe").then_some(text)
    });
    let _ = listener.kill();
    let _ = listener.wait();
    assert_eq!(recorded, "connected probe\n", "the listener received more");

    // And `yy serve` refuses to listen there in clear unless told so.
    env.create_admin("root");
    let out = env.run(&[
        "serve",
        "--listen",
        &listen(),
        "--data-dir",
        env.data_dir().to_str().unwrap(),
    ]);
    out.fails(2, "--insecure-http");
    let server = Server::start_with(&env, &env.data_dir(), &listen(), &["--insecure-http"]);
    assert!(server.log().contains("readable"), "{}", server.log());
}

fn write_private(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// A certificate authority of the test's own.
struct Ca(rcgen::CertifiedIssuer<'static, rcgen::KeyPair>);

impl Ca {
    fn new() -> Ca {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "yy test CA");
        Ca(rcgen::CertifiedIssuer::self_signed(params, key).unwrap())
    }

    fn pem(&self) -> String {
        self.0.pem()
    }

    /// Writes a new certificate for `name` and its key; returns its fingerprint.
    fn issue(&self, name: &str, cert: &std::path::Path, key: &std::path::Path) -> String {
        let leaf_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        let leaf = params.signed_by(&leaf_key, &*self.0).unwrap();
        std::fs::write(key, leaf_key.serialize_pem()).unwrap();
        std::fs::write(cert, leaf.pem()).unwrap();
        yy::api::tls::fingerprint(leaf.der())
    }
}
