//! The managed browser's first part (issue 28 A): Debian's Chromium started by yy on a
//! private profile, driven through the DevTools pipe. Pages are `data:` URLs, so nothing
//! leaves the machine, loopback included.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use yy::browser::{Browser, LaunchOptions, Link, profile_dir};

const PAGE: &str = "data:text/html,<title>Quarterly</title><h1>Hello from the page</h1>\
    <p>Second line</p><a href='https://example.org/report'>the report</a>";

#[tokio::test]
async fn a_page_is_opened_read_and_photographed_through_the_pipe() {
    let Some(exe) = common::chromium::require_chromium() else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let profile = profile_dir(data.path(), "agent-1");
    let browser = Browser::launch(&LaunchOptions::new(exe), &profile)
        .await
        .unwrap();
    let mode = std::fs::metadata(&profile).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the profile is private");
    // Only the pipe: Chromium opened no debugging port.
    assert!(!profile.join("DevToolsActivePort").exists());

    browser.navigate(PAGE).await.unwrap();
    let snap = browser.snapshot().await.unwrap();
    assert_eq!(snap.title, "Quarterly");
    assert!(snap.text.contains("Hello from the page"), "{snap:?}");
    assert!(snap.text.contains("Second line"), "{snap:?}");
    assert_eq!(
        snap.links,
        vec![Link {
            text: "the report".into(),
            href: "https://example.org/report".into()
        }]
    );

    let png = browser.screenshot().await.unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // The IHDR chunk: width and height, big-endian, at bytes 16..24.
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (1280, 800));

    // A page the browser cannot open is an error that names it, and the browser stays.
    let err = browser
        .navigate("yy-no-such-scheme://x")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("yy-no-such-scheme://x"), "{err}");
    assert!(browser.snapshot().await.is_ok());

    // Dropped, the browser goes; its profile stays for the next time.
    let pid = browser.pid() as i32;
    drop(browser);
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        // A zombie until reaped counts as gone: it runs nothing.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.split_whitespace().nth(2) == Some("Z"))
            .unwrap_or(true)
    });
    assert!(gone, "chromium {pid} still runs");
    assert!(profile.is_dir());
    // A missing Chromium is named.
    let missing = data.path().join("no-chromium");
    let err = match Browser::launch(&LaunchOptions::new(missing.clone()), &profile).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a missing executable started"),
    };
    assert!(err.contains(missing.to_str().unwrap()), "{err}");
}
