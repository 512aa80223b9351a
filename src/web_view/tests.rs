//! The page's server without a computer: the one-time link, the cookie, the Host check,
//! the answers a browser gets, and which input the page may send.

use super::*;
use tower::ServiceExt;

fn web(fence: Option<i64>) -> Arc<Web> {
    Arc::new(Web {
        // Never called by these requests: each is refused before any relay.
        client: Client::new("http://127.0.0.1:9", None).unwrap(),
        screen: Screen::Computer("c1".into()),
        host: "127.0.0.1:4000".into(),
        token: Mutex::new(Some("tok".into())),
        session: "sess".into(),
        fence,
        frames: Semaphore::new(1),
        inputs: Semaphore::new(1),
    })
}

async fn get(app: &Router, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut req = Request::builder()
        .uri(path)
        .header("host", "127.0.0.1:4000");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    app.clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn the_link_works_once_and_only_the_cookie_signs_in() {
    let app = router(web(Some(3)));
    let first = get(&app, "/?t=tok", &[]).await;
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    let cookie = first.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.starts_with("yy_attach=sess;") && cookie.contains("HttpOnly"));
    assert_eq!(
        get(&app, "/?t=tok", &[]).await.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        get(&app, "/?t=other", &[]).await.status(),
        StatusCode::FORBIDDEN
    );
    for path in ["/", "/app.js", "/state", "/frame"] {
        let r = get(&app, path, &[]).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{path}");
        let r = get(&app, path, &[("cookie", "yy_attach=wrong")]).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let page = get(&app, "/", &[("cookie", "a=b; yy_attach=sess")]).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        page.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
    let state = get(&app, "/state", &[("cookie", "yy_attach=sess")]).await;
    let body = axum::body::to_bytes(state.into_body(), 4096).await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["fence"], 3);
    // Another Host name (DNS rebinding) is refused even with the cookie.
    let req = Request::builder()
        .uri("/state")
        .header("host", "evil.test:4000")
        .header("cookie", "yy_attach=sess")
        .body(Body::empty())
        .unwrap();
    let r = app.clone().oneshot(req).await.unwrap();
    assert_eq!(r.status(), StatusCode::MISDIRECTED_REQUEST);
}

async fn body(r: Response) -> String {
    let bytes = axum::body::to_bytes(r.into_body(), 64 * 1024)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn a_used_link_tells_a_browser_what_happened_and_what_to_run() {
    let app = router(web(Some(3)));
    assert_eq!(
        get(&app, "/?t=tok", &[]).await.status(),
        StatusCode::SEE_OTHER
    );
    // What Firefox and Chromium send for a page they navigate to.
    let browser = ("accept", "text/html,application/xhtml+xml,*/*;q=0.8");
    let again = get(&app, "/?t=tok", &[browser]).await;
    assert_eq!(again.status(), StatusCode::FORBIDDEN);
    assert!(
        again.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let page = body(again).await;
    assert!(page.contains("already used or has expired"), "{page}");
    assert!(
        page.contains("<code>yy computer attach c1 --web --control</code>"),
        "{page}"
    );
    // An API client (or no Accept at all) keeps the JSON error, with the same status.
    for accept in [vec![("accept", "application/json")], vec![]] {
        let r = get(&app, "/?t=tok", &accept).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let v: serde_json::Value = serde_json::from_str(&body(r).await).unwrap();
        let msg = v["error"].as_str().unwrap();
        assert!(msg.contains("already used"), "{msg}");
        assert!(
            msg.contains("yy computer attach c1 --web --control"),
            "{msg}"
        );
    }
    // The browser that opened it is signed in: the link opened again shows the page.
    let signed_in = get(&app, "/?t=tok", &[browser, ("cookie", "yy_attach=sess")]).await;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    assert_eq!(signed_in.headers()[header::LOCATION], "/");
    assert!(signed_in.headers().get(header::SET_COOKIE).is_none());
    // Another browser, without the link: a page that says how to sign in.
    let other = get(&app, "/", &[browser]).await;
    assert_eq!(other.status(), StatusCode::UNAUTHORIZED);
    let page = body(other).await;
    assert!(page.contains("Not signed in"), "{page}");
    assert!(
        page.contains("yy computer attach c1 --web --control"),
        "{page}"
    );
    // The page's script gets JSON whatever it accepts.
    let frame = get(&app, "/frame", &[browser]).await;
    assert_eq!(frame.status(), StatusCode::UNAUTHORIZED);
    assert!(body(frame).await.starts_with("{\"error\""));
    // Read-only, the command to run has no --control.
    let read_only = router(web(None));
    let r = get(&read_only, "/?t=wrong", &[browser]).await;
    let page = body(r).await;
    assert!(
        page.contains("<code>yy computer attach c1 --web</code>"),
        "{page}"
    );
}

#[tokio::test]
async fn input_is_json_small_and_needs_control() {
    let post = |app: Router, body: String, ctype: &'static str| async move {
        let req = Request::builder()
            .method("POST")
            .uri("/input")
            .header("host", "127.0.0.1:4000")
            .header("cookie", "yy_attach=sess")
            .header("content-type", ctype)
            .body(Body::from(body))
            .unwrap();
        app.oneshot(req).await.unwrap().status()
    };
    let click = r#"{"fence":1,"frame_id":"f1","action":{"action":"left_click","x":1,"y":2}}"#;
    let read_only = router(web(None));
    assert_eq!(
        post(read_only, click.into(), "application/json").await,
        StatusCode::FORBIDDEN
    );
    let app = router(web(Some(1)));
    // A form post (what a cross-site page could send) is not JSON.
    assert_eq!(
        post(app.clone(), click.into(), "text/plain").await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    let big = format!(
        r#"{{"fence":1,"frame_id":"f1","action":{{"action":"type_text","text":"{}"}}}}"#,
        "x".repeat(MAX_BODY)
    );
    assert_eq!(
        post(app.clone(), big, "application/json").await,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let shot = r#"{"fence":1,"frame_id":"f1","action":{"action":"screenshot"}}"#;
    assert_eq!(
        post(app, shot.into(), "application/json").await,
        StatusCode::BAD_REQUEST
    );
}

#[test]
fn secrets_compare_whole() {
    assert!(same("abc", "abc"));
    assert!(!same("abc", "abd"));
    assert!(!same("abc", "ab"));
    assert_eq!(random_hex().len(), 64);
    assert_ne!(random_hex(), random_hex());
}

#[test]
fn the_page_sends_only_input() {
    assert!(allowed(&ScreenAction::LeftClick { x: 1, y: 2 }).is_ok());
    assert!(allowed(&ScreenAction::TypeText { text: "hi".into() }).is_ok());
    assert!(
        allowed(&ScreenAction::TypeText {
            text: "x".repeat(MAX_TEXT_CHARS + 1)
        })
        .is_err()
    );
    assert!(allowed(&ScreenAction::Screenshot).is_err());
    assert!(allowed(&ScreenAction::Drag { path: vec![] }).is_err());
    assert!(allowed(&ScreenAction::Hotkey { keys: vec![] }).is_err());
    assert_eq!(html_escape("<a\"&>"), "&lt;a&quot;&amp;&gt;");
}
