//! What every console page is made of: the signed-in [`Session`] and its
//! CSRF-checked forms ([`Post`]), the page error, the organization a page
//! is about, the layout, and small formatting helpers.

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::web;
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse, ResponseError};
use maud::{DOCTYPE, Markup, html};
use serde::de::DeserializeOwned;
use sluice_domain::identity::access::Role;
use sluice_domain::identity::org::Organization;
use sluice_domain::shared::ids::OrgId;
use sluice_domain::shared::secret::{constant_time_eq, sha256_hex};
use sluice_http::AppState;
use sluice_http::body::read_body;
use sluice_http::error::ApiError;
use sluice_http::session::{AuthOutcome, Caller, CookieSession};
use time::OffsetDateTime;

/// The largest console form (IaC documents, gateway payloads).
pub(crate) const MAX_FORM: usize = 4 * 1024 * 1024;

/// What went wrong on a console page: signed out (to the sign-in page), a
/// refused form (CSRF), or a use case's error, shown as a page.
#[derive(Debug)]
pub enum PageError {
    SignIn(String),
    Api(ApiError),
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SignIn(_) => f.write_str("sign in first"),
            Self::Api(e) => f.write_str(&e.message),
        }
    }
}

impl<E: Into<ApiError>> From<E> for PageError {
    fn from(e: E) -> Self {
        Self::Api(e.into())
    }
}

impl ResponseError for PageError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::SignIn(_) => StatusCode::SEE_OTHER,
            Self::Api(e) => e.status(),
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            Self::SignIn(next) => {
                let to = format!("/login?next={}", urlencode(next));
                HttpResponse::SeeOther().insert_header((header::LOCATION, to)).finish()
            }
            Self::Api(e) => {
                let body = bare(
                    "Error",
                    html! {
                        main.narrow {
                            h1 { (e.status().as_u16()) " · " (e.status().canonical_reason().unwrap_or("Error")) }
                            p.error role="alert" { (e.message) }
                            @if let Some(errors) = e.details.get("errors").and_then(|v| v.as_array()) {
                                ul { @for x in errors { li { code { (x["field"].as_str().unwrap_or("")) } " " (x["message"].as_str().unwrap_or("")) } } }
                            }
                            p { a href="/" { "Home" } }
                        }
                    },
                );
                let mut res = html_response(body);
                *res.status_mut() = e.status();
                res
            }
        }
    }
}

pub type PageResult = Result<HttpResponse, PageError>;

pub(crate) fn urlencode(s: &str) -> String {
    serde_urlencoded::to_string([("", s)]).map(|x| x.trim_start_matches('=').to_string()).unwrap_or_default()
}

/// The signed-in user of a console page, with the CSRF token of the
/// session.
pub struct Session {
    pub caller: Caller,
    pub csrf: String,
    /// What the action before this page did, from [`redirect_saying`].
    pub said: Option<String>,
}

/// The cookie that carries what an action did to the page it redirects
/// to (post/redirect/get): read once, by that page.
const SAID_COOKIE: &str = "sluice_said";

/// A notice's tag: a hash of its text and of the session it was left for
/// (through the session's CSRF token), so that a notice cookie planted by
/// someone who does not hold the session (another site, a sibling
/// subdomain) is shown to nobody.
fn said_tag(csrf: &str, text: &str) -> String {
    sha256_hex(format!("sluice console notice\0{csrf}\0{text}").as_bytes())[..32].to_string()
}

/// The CSRF token of a session: a hash of the cookie, which a page of
/// another site can neither read nor compute.
fn csrf_of(cookie: &str) -> String {
    sha256_hex(format!("sluice console csrf\0{cookie}").as_bytes())[..32].to_string()
}

impl FromRequest for Session {
    type Error = PageError;
    type Future = std::future::Ready<Result<Self, PageError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        // Back to the page after signing in; a form's target is no page.
        let next = match *req.method() {
            actix_web::http::Method::GET | actix_web::http::Method::HEAD => {
                req.uri().path_and_query().map_or("/", |p| p.as_str()).to_string()
            }
            _ => "/".to_string(),
        };
        let caller = match req.extensions().get::<AuthOutcome>() {
            Some(AuthOutcome::Ok(c)) => c.clone(),
            _ => return std::future::ready(Err(PageError::SignIn(next))),
        };
        let csrf = req.extensions().get::<CookieSession>().map(|c| csrf_of(&c.0)).unwrap_or_default();
        let said = req.cookie(SAID_COOKIE).and_then(|c| {
            let (tag, encoded) = c.value().split_once('.')?;
            let text: Vec<(String, String)> = serde_urlencoded::from_str(&format!("s={encoded}")).ok()?;
            let text = text.into_iter().next()?.1;
            // Left for this session by this server, or shown to nobody.
            (!text.is_empty() && !csrf.is_empty() && tag == said_tag(&csrf, &text))
                .then(|| text.chars().take(MAX_SAID).collect())
        });
        std::future::ready(Ok(Session { caller, csrf, said }))
    }
}

/// Whether the request's `Origin` (or, without one, `Referer`) is this
/// server: browsers send one with every POST.
pub(crate) fn same_origin(req: &HttpRequest) -> bool {
    let from = req.headers().get(header::ORIGIN).or_else(|| req.headers().get(header::REFERER));
    let Some(from) = from.and_then(|v| v.to_str().ok()) else { return false };
    let Some((scheme, rest)) = from.split_once("://") else { return false };
    let origin = rest.split(['/', '?', '#']).next().unwrap_or("");
    // The console's configured address (behind a proxy that rewrites
    // Host), or the Host the browser itself sent with this request's own
    // scheme; never X-Forwarded-Host, which any client can send.
    let configured = req
        .app_data::<web::Data<AppState>>()
        .map(|s| s.console_url.trim_end_matches('/').to_string())
        .is_some_and(|c| !c.is_empty() && c == format!("{scheme}://{origin}"));
    let host = req.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    let direct = !host.is_empty() && origin == host && scheme == req.connection_info().scheme();
    configured || direct
}

/// A console form of type `T` from a signed-in user: its CSRF token and
/// origin are checked before anything is read into `T`.
pub struct Post<T> {
    pub session: Session,
    pub form: T,
}

#[derive(serde::Deserialize)]
struct CsrfField {
    #[serde(default)]
    csrf: String,
}

impl<T: DeserializeOwned + 'static> FromRequest for Post<T> {
    type Error = PageError;
    type Future = futures_util::future::LocalBoxFuture<'static, Result<Self, PageError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let session = Session::from_request(req, payload).into_inner();
        let cookie = req.extensions().get::<CookieSession>().is_some();
        let origin_ok = same_origin(req);
        let mut payload = payload.take();
        Box::pin(async move {
            let session = session?;
            let bytes = read_body(&mut payload, MAX_FORM).await?;
            if cookie {
                let sent: CsrfField = serde_urlencoded::from_bytes(&bytes).unwrap_or(CsrfField { csrf: String::new() });
                if !origin_ok || !constant_time_eq(sent.csrf.as_bytes(), session.csrf.as_bytes()) {
                    return Err(ApiError::new(
                        sluice_domain::shared::error::Code::CsrfFailed,
                        "this form is stale or came from another site; reload the page and try again",
                    )
                    .into());
                }
            }
            let form = serde_urlencoded::from_bytes(&bytes)
                .map_err(|e| ApiError::validation(vec![sluice_domain::FieldError::new("form", e.to_string())]))?;
            Ok(Post { session, form })
        })
    }
}

/// A form with nothing but its CSRF token.
#[derive(serde::Deserialize)]
pub struct Empty {}

/// The organization a page is about and the caller's role in it.
pub struct OrgCtx {
    pub org: Organization,
    pub role: Role,
    pub orgs: Vec<Organization>,
}

impl OrgCtx {
    pub async fn load(state: &AppState, s: &Session, org: uuid::Uuid) -> Result<Self, PageError> {
        let p = &s.caller.principal;
        let org = state.sluice.identity.get_organization(p, OrgId::from(org)).await?;
        let role = state.sluice.identity.role_in(p, org.id).await?.unwrap_or(Role::Viewer);
        let orgs = state
            .sluice
            .identity
            .list_organizations(p, sluice_domain::shared::page::PageRequest { limit: 50, after: None })
            .await
            .map(|p| p.items)
            .unwrap_or_default();
        // The switcher lists the first 50; this one is in it even past them.
        let mut orgs = orgs;
        if !orgs.iter().any(|o| o.id == org.id) {
            orgs.push(org.clone());
        }
        Ok(Self { org, role, orgs })
    }

    pub fn id(&self) -> OrgId {
        self.org.id
    }

    /// Whether the caller may change things (Editor or Admin).
    pub fn can_write(&self) -> bool {
        self.role >= Role::Editor
    }

    pub fn is_admin(&self) -> bool {
        self.role >= Role::Admin
    }

    /// A path under this organization's pages.
    pub fn at(&self, rest: &str) -> String {
        format!("/o/{}{rest}", self.org.id)
    }
}

/// The sections of an organization's pages, in the navigation's order.
const SECTIONS: [(&str, &str); 9] = [
    ("", "Overview"),
    ("/connections", "Connections"),
    ("/flows", "Flows"),
    ("/topology", "Topology"),
    ("/catalog", "Catalog"),
    ("/gateway", "Gateway"),
    ("/iac", "IaC"),
    ("/audit", "Audit"),
    ("/settings", "Settings"),
];

/// A page of an organization: navigation, title, body.
pub fn page(ctx: &OrgCtx, s: &Session, section: &str, title: &str, body: Markup) -> HttpResponse {
    let markup = bare(
        title,
        html! {
            a.skip href="#main" { "Skip to the content" }
            header.top {
                a.brand href="/" { (logo()) "Sluice" }
                form.orgpick method="get" action="/" {
                    label.sr for="org-switch" { "Organization" }
                    select #org-switch name="org" data-autosubmit {
                        @for o in &ctx.orgs {
                            option value=(o.id) selected[o.id == ctx.org.id] { (o.name) }
                        }
                    }
                    noscript { button { "Go" } }
                }
                nav.sections aria-label="Sections" {
                    @for (path, label) in SECTIONS {
                        a href=(ctx.at(path)) aria-current=[(path == section).then_some("page")] { (label) }
                    }
                }
                div.who {
                    span.role title="Your role in this organization" { (ctx.role.as_str()) }
                    form method="post" action="/logout" {
                        input type="hidden" name="csrf" value=(s.csrf);
                        button.link { "Sign out" }
                    }
                }
            }
            main #main tabindex="-1" {
                h1 { (title) }
                @if let Some(text) = &s.said { (notice(text)) }
                (body)
            }
        },
    );
    let mut res = html_response(markup);
    if s.said.is_some() {
        // Said once: a reload or a later page does not say it again.
        let gone = actix_web::cookie::Cookie::build(SAID_COOKIE, "").path("/").finish();
        let _ = res.add_removal_cookie(&gone);
    }
    res
}

pub fn html_response(markup: Markup) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header(("X-Frame-Options", "DENY"))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        // Tokens ride in some console addresses (an invitation link, a
        // sign-in's way back): never sent to another site.
        .insert_header(("Referrer-Policy", "same-origin"))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self' https:",
        ))
        .body(markup.into_string())
}

/// The HTML document around a page's body.
pub fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Sluice" }
                link rel="stylesheet" href="/assets/console.css";
                link rel="icon" href=(format!("data:image/svg+xml,{}", urlencode(ICON).replace('+', "%20")));
                script src="/assets/console.js" defer {}
            }
            body { (body) }
        }
    }
}

pub(crate) const ICON: &str = r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><path d="M1 5h14v2H1zM1 9h14v2H1z" fill="#2563eb"/></svg>"##;

fn logo() -> Markup {
    html! { svg.logo viewBox="0 0 16 16" aria-hidden="true" { path d="M1 5h14v2H1zM1 9h14v2H1z" {} } }
}

/// A hidden CSRF field.
pub fn csrf(s: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(s.csrf); }
}

/// A one-button form posting to `action`, asking first when `confirm` is set.
pub fn button(s: &Session, action: &str, label: &str, class: &str, confirm: Option<&str>) -> Markup {
    html! {
        form.inline method="post" action=(action) data-confirm=[confirm] {
            (csrf(s))
            button class=(class) { (label) }
        }
    }
}

/// `2026-11-23 15:04:05` (UTC).
/// An id as pages show it where a resource has no name: the last 12 hex
/// digits (a UUIDv7's random part; its first 8 are time, alike for every
/// id made within ~65 seconds), monospaced, the whole id on hover.
pub fn short_id(id: &str) -> Markup {
    let hex: String = id.chars().filter(char::is_ascii_hexdigit).collect();
    let tail = &hex[hex.len().saturating_sub(12)..];
    html! { code title=(id) { "…" (tail) } }
}

/// What an audit entry is about: the resource's name when the entry
/// recorded one (created, updated, deleted), else its id; a link to its
/// page while it has one (not for an entry that deleted it).
pub fn audit_resource(ctx: &OrgCtx, e: &sluice_domain::shared::audit::AuditEntry) -> Markup {
    let name = ["after", "before"]
        .iter()
        .find_map(|side| e.details.get(side).and_then(|v| v.get("name")).and_then(|n| n.as_str()))
        .or_else(|| e.details.get("name").and_then(|n| n.as_str()));
    let label = html! {
        @match (name, &e.resource_id) {
            (Some(n), _) => { strong { (n) } }
            (None, Some(id)) => { (short_id(id)) }
            (None, None) => {}
        }
    };
    let page = match (e.resource_type.as_str(), &e.resource_id) {
        _ if e.action.ends_with(".deleted") => None,
        ("connection", Some(id)) => Some(format!("/connections/{id}")),
        ("flow", Some(id)) => Some(format!("/flows/{id}")),
        ("run", Some(id)) => Some(format!("/runs/{id}")),
        ("integration", Some(id)) => Some(format!("/integrations/{id}")),
        ("data_asset", Some(id)) => Some(format!("/catalog/{id}")),
        ("rule" | "api_key" | "invitation" | "member", _) => Some("/settings".to_string()),
        _ => None,
    };
    html! {
        (e.resource_type) " "
        @match page { Some(p) => { a href=(ctx.at(&p)) { (label) } } None => { (label) } }
    }
}

/// What an update changed, field by field (`old → new`), from the entry's
/// `before` and `after` (secrets were redacted when it was recorded); at
/// most eight fields, each value cut to 60 characters.
pub fn audit_changes(e: &sluice_domain::shared::audit::AuditEntry) -> Markup {
    let (Some(before), Some(after)) =
        (e.details.get("before").and_then(|v| v.as_object()), e.details.get("after").and_then(|v| v.as_object()))
    else {
        return html! {};
    };
    let shown = |v: Option<&serde_json::Value>| -> String {
        let text = match v {
            None | Some(serde_json::Value::Null) => "—".to_string(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        match text.char_indices().nth(60) {
            Some((at, _)) => format!("{}…", &text[..at]),
            None => text,
        }
    };
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    let changed: Vec<&String> = keys.into_iter().filter(|k| before.get(*k) != after.get(*k)).collect();
    html! {
        @if !changed.is_empty() {
            ul.changes {
                @for k in changed.iter().take(8) {
                    li { code { (k) } " " (shown(before.get(*k))) " → " (shown(after.get(*k))) }
                }
                @if changed.len() > 8 { li.muted { (changed.len() - 8) " more" } }
            }
        }
    }
}

/// An instant as the console shows it, in UTC and saying so.
pub fn when(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

pub fn when_opt(t: Option<OffsetDateTime>) -> String {
    t.map(when).unwrap_or_else(|| "—".into())
}

/// A status as a coloured badge.
pub fn badge(status: &str) -> Markup {
    let tone = match status {
        "succeeded" | "healthy" | "active" | "valid" | "compatible" | "create" | "done" | "matched" => "ok",
        "failed" | "failing" | "drift_detected" | "breaking" | "invalid" | "delete" | "error" | "over budget"
        | "mismatched" => "bad",
        "running" | "queued" | "update" | "warning" | "paused" | "pending" => "live",
        _ => "plain",
    };
    html! { span class={"badge " (tone)} { (status) } }
}

/// `512 B`, `1.5 KiB`, `10.0 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `1,234,567`.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A use case's error in a form's page: its message and each field's
/// problem.
/// The page `shown` in answer to an action that failed with `e`, which
/// says so in an [`error_box`]; it carries `e`'s status.
pub fn failed(shown: PageResult, e: &ApiError) -> PageResult {
    let mut res = shown?;
    *res.status_mut() = e.status();
    Ok(res)
}

pub fn error_box(e: &ApiError) -> Markup {
    let problems = Problems::of(Some(e));
    html! {
        div.error role="alert" {
            p { (e.message) }
            @if !problems.fields.is_empty() {
                ul { @for (field, message) in &problems.fields { li { (field_label(field)) ": " (message) } } }
            }
        }
    }
}

/// A field's API path as a person reads it: `config.mappings[0].cursor_field`
/// is "mappings #1 › cursor field".
pub fn field_label(path: &str) -> String {
    let path = path.strip_prefix("config.").unwrap_or(path);
    let mut out = String::new();
    for (i, part) in path.split('.').enumerate() {
        if i > 0 {
            out.push_str(" › ");
        }
        let (name, index) = match part.split_once('[') {
            Some((name, rest)) => (name, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        out.push_str(&name.replace('_', " "));
        if let Some(i) = index {
            out.push_str(&format!(" #{}", i + 1));
        }
    }
    let mut chars = out.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// A day of a list's filter (YYYY-MM-DD, UTC): its first instant, or
/// (`end`) the first instant of the day after; an error names the field.
pub fn day_bound(field: &str, value: &Option<String>, end: bool) -> Result<Option<OffsetDateTime>, ApiError> {
    let Some(v) = value.as_deref().filter(|v| !v.trim().is_empty()) else { return Ok(None) };
    let day = sluice_domain::shared::record::parse_date(v)
        .ok_or_else(|| ApiError::validation(vec![sluice_domain::FieldError::new(field, "a day, as YYYY-MM-DD")]))?;
    let day = if end { day.next_day().unwrap_or(day) } else { day };
    Ok(Some(day.midnight().assume_utc()))
}

/// A list's filters as a query string (those set), for its pager.
pub fn filters_query(pairs: &[(&str, &Option<String>)]) -> String {
    pairs
        .iter()
        .filter_map(|(k, v)| v.as_deref().filter(|v| !v.trim().is_empty()).map(|v| format!("{k}={}", urlencode(v))))
        .collect::<Vec<_>>()
        .join("&")
}

/// A refused form's problems by field (the API's paths), each shown next
/// to its input: the input marked `aria-invalid` and described by the
/// message.
#[derive(Default)]
pub struct Problems {
    pub fields: Vec<(String, String)>,
}

impl Problems {
    pub fn of(e: Option<&ApiError>) -> Self {
        let listed = e.and_then(|e| e.details.get("errors")).and_then(|v| v.as_array());
        let fields = listed
            .into_iter()
            .flatten()
            .map(|x| (x["field"].as_str().unwrap_or("").to_string(), x["message"].as_str().unwrap_or("").to_string()))
            .collect();
        Problems { fields }
    }

    /// The problem of `field`, or of a field under it (`config` has
    /// `config.port`'s).
    pub fn on(&self, field: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(f, _)| f == field || f.strip_prefix(field).is_some_and(|r| r.starts_with(['.', '['])))
            .map(|(_, m)| m.as_str())
    }

    /// `aria-invalid` of the input of `field`.
    pub fn invalid(&self, field: &str) -> Option<&'static str> {
        self.on(field).map(|_| "true")
    }

    /// `aria-describedby` of the input `id` of `field`: its message.
    pub fn described(&self, field: &str, id: &str) -> Option<String> {
        self.on(field).map(|_| format!("{id}-error"))
    }

    /// A text input `name` (id `id`) holding `value`, marked and described
    /// by the problem of `field`, with the problem next to it.
    pub fn input(&self, id: &str, name: &str, value: &str, placeholder: &str, field: &str) -> Markup {
        html! {
            span {
                input id=(id) name=(name) value=(value) placeholder=(placeholder)
                    aria-invalid=[self.invalid(field)] aria-describedby=[self.described(field, id)];
                (self.note(field, id))
            }
        }
    }

    /// The message of `field`, next to its input `id`.
    pub fn note(&self, field: &str, id: &str) -> Markup {
        html! { @if let Some(m) = self.on(field) { span.field-error id=(format!("{id}-error")) { (m) } } }
    }
}

/// A notice at the top of a page.
pub fn notice(text: &str) -> Markup {
    html! { p.notice role="status" { (text) } }
}

/// Pretty JSON in a `<pre>`.
pub fn json_block(v: &serde_json::Value) -> Markup {
    html! { pre.json { (serde_json::to_string_pretty(v).unwrap_or_default()) } }
}

/// Rows on one page of a long list.
pub const PAGE_SIZE: u64 = 100;
/// What a form's pick list or a lookup loads: the first 200 (the API's
/// largest page).
pub const LOOKUP: sluice_domain::shared::page::PageRequest =
    sluice_domain::shared::page::PageRequest { limit: sluice_domain::shared::page::MAX_LIMIT, after: None };

/// A list page's position: `?after=<the last id of the page before>`.
#[derive(serde::Deserialize, Default)]
pub struct Paging {
    #[serde(default)]
    pub after: Option<uuid::Uuid>,
}

impl Paging {
    pub fn request(&self) -> sluice_domain::shared::page::PageRequest {
        sluice_domain::shared::page::PageRequest { limit: PAGE_SIZE, after: self.after }
    }
}

/// "Older →" to the next page of a list at `base`, when there is one;
/// "Newest" back to the first when this is not it.
pub fn pager(base: &str, after: Option<uuid::Uuid>, next: Option<&str>) -> Markup {
    let sep = if base.contains('?') { '&' } else { '?' };
    html! {
        @if after.is_some() || next.is_some() {
            nav.pager aria-label="Pages" {
                @if after.is_some() { a href=(base) { "← Newest" } }
                @if let Some(n) = next { a href=(format!("{base}{sep}after={}", urlencode(n))) rel="next" { "Older →" } }
            }
        }
    }
}

pub(crate) fn redirect(to: &str) -> HttpResponse {
    HttpResponse::SeeOther().insert_header((header::LOCATION, to.to_string())).finish()
}

/// The longest notice an action leaves for the next page, in characters,
/// and its cookie's value, encoded (browsers drop cookies past 4 KB).
const MAX_SAID: usize = 500;
const MAX_SAID_ENCODED: usize = 1500;

/// What a stored secret reads as in a form: sent back, it keeps the secret.
pub(crate) const REDACTED: &str = sluice_domain::shared::audit::REDACTED;

/// An action's answer: to the page `to`, which says `text` once (in a
/// short-lived cookie: reload, back and bookmarks show the page, never
/// the action again).
pub(crate) fn redirect_saying(s: &Session, to: &str, text: &str) -> HttpResponse {
    let mut text: String = text.chars().take(MAX_SAID).collect();
    let mut value = urlencode(&text);
    while value.len() > MAX_SAID_ENCODED {
        text.pop();
        value = urlencode(&text);
    }
    let value = format!("{}.{value}", said_tag(&s.csrf, &text));
    let cookie = actix_web::cookie::Cookie::build(SAID_COOKIE, value)
        .path("/")
        .http_only(true)
        .same_site(actix_web::cookie::SameSite::Strict)
        .max_age(actix_web::cookie::time::Duration::seconds(60))
        .finish();
    HttpResponse::SeeOther().cookie(cookie).insert_header((header::LOCATION, to.to_string())).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_234_567), "1,234,567");
    }

    #[test]
    fn field_paths_read_as_words() {
        assert_eq!(field_label("config.mappings[0].cursor_field"), "Mappings #1 › cursor field");
        assert_eq!(field_label("name"), "Name");
        assert_eq!(field_label("config.port"), "Port");
        let e = ApiError::validation(vec![sluice_domain::FieldError::new("config.port", "must be an integer")]);
        let p = Problems::of(Some(&e));
        assert_eq!(p.on("config"), Some("must be an integer"));
        assert_eq!(p.on("config.port"), Some("must be an integer"));
        assert_eq!(p.on("config.po"), None);
        assert_eq!(p.invalid("name"), None);
    }

    #[test]
    fn the_csrf_token_depends_on_the_session() {
        assert_ne!(csrf_of("a"), csrf_of("b"));
        assert_eq!(csrf_of("a").len(), 32);
    }
}
