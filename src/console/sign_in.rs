//! Signing in and out: the operator a request comes from (its session cookie, and for a
//! form its token), the sign-in page and form (argon2, throttled, at most CHECKS_AT_ONCE
//! checked at once), and signing out.

use super::*;

/// The signed-in operator, or the answer for one who is not: pages redirect to sign-in,
/// forms get 401.
pub(super) async fn operator(
    req: &HttpRequest,
    console: &Console,
    page: bool,
) -> Result<(String, OperatorSession), HttpResponse> {
    let refused = || {
        if page {
            see_other("/sign-in")
        } else {
            HttpResponse::Unauthorized().body("sign in first")
        }
    };
    let Some(cookie) = req.cookie(auth::SESSION_COOKIE) else {
        return Err(refused());
    };
    let digest = auth::digest(cookie.value());
    match console.guard.store().session(&digest).await {
        // Still the operator it was opened for, with the same password hash.
        Ok(Some(session))
            if auth::credential(&console.operators, &session.operator).as_deref()
                == Some(session.credential.as_str()) =>
        {
            Ok((digest, session))
        }
        Ok(Some(session)) => {
            tracing::info!(operator = %session.operator, "a console session ended: its operator was removed or their password changed");
            if let Err(e) = console.guard.store().close_session(&digest).await {
                return Err(internal(e));
            }
            Err(refused())
        }
        Ok(None) => Err(refused()),
        Err(e) => Err(internal(e)),
    }
}

/// A form's checks: a session, the console's own origin, the session's token.
pub(super) async fn form_operator(
    req: &HttpRequest,
    console: &Console,
    form: &HashMap<String, String>,
) -> Result<(String, OperatorSession), HttpResponse> {
    if !auth::same_origin(req) {
        return Err(HttpResponse::Forbidden().body("this form was sent from another site"));
    }
    let (digest, session) = operator(req, console, false).await?;
    let given = form.get("csrf").map(String::as_str).unwrap_or("");
    if !auth::same(given, &session.csrf) {
        return Err(
            HttpResponse::Forbidden().body("this form is not from your session: reload the page")
        );
    }
    Ok((digest, session))
}

pub(super) async fn sign_in_page() -> HttpResponse {
    let csrf = auth::token();
    HttpResponse::Ok()
        .cookie(auth::cookie(
            auth::SIGN_IN_COOKIE,
            csrf.clone(),
            time::Duration::minutes(30),
        ))
        .content_type("text/html; charset=utf-8")
        .body(pages::sign_in(&csrf, None).into_string())
}

pub(super) async fn sign_in(
    req: HttpRequest,
    console: web::Data<Console>,
    form: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    if !auth::same_origin(&req) {
        return HttpResponse::Forbidden().body("this form was sent from another site");
    }
    let expected = req
        .cookie(auth::SIGN_IN_COOKIE)
        .map(|c| c.value().to_owned())
        .unwrap_or_default();
    let given = form.get("csrf").map(String::as_str).unwrap_or("");
    if expected.is_empty() || !auth::same(given, &expected) {
        return HttpResponse::Forbidden()
            .body("this form is not from this console: reload the sign-in page");
    }
    let name = form
        .get("name")
        .map(String::as_str)
        .unwrap_or("")
        .to_owned();
    let password = form
        .get("password")
        .map(String::as_str)
        .unwrap_or("")
        .to_owned();
    let peer = req
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let keys = [format!("name:{name}"), format!("peer:{peer}")];
    let too_many = |wait: Duration| {
        HttpResponse::TooManyRequests()
            .insert_header((header::RETRY_AFTER, wait.as_secs().max(1).to_string()))
            .body("too many sign-ins: wait, then try again")
    };
    if let Some(wait) = console.throttle.retry_after(&keys) {
        return too_many(wait);
    }
    // argon2 off the console's worker thread, and only a few at once.
    let Ok(_turn) = console.checking.try_acquire() else {
        return too_many(Duration::from_secs(1));
    };
    let operators = console.operators.clone();
    let checked = {
        let (name, password) = (name.clone(), password.clone());
        web::block(move || auth::check_password(&operators, &name, &password)).await
    };
    let Ok(signed_in) = checked else {
        return internal("the password check did not finish");
    };
    let name = name.as_str();
    if !signed_in {
        console.throttle.failed(&keys);
        // The name is logged only when it is an operator's: a password typed into the
        // name field must not land in the log.
        match auth::credential(&console.operators, name) {
            Some(_) => tracing::warn!(operator = name, "a console sign-in was refused"),
            None => {
                tracing::warn!("a console sign-in with a name that is no operator's was refused")
            }
        }
        let csrf = auth::token();
        return HttpResponse::Unauthorized()
            .cookie(auth::cookie(
                auth::SIGN_IN_COOKIE,
                csrf.clone(),
                time::Duration::minutes(30),
            ))
            .content_type("text/html; charset=utf-8")
            .body(
                pages::sign_in(&csrf, Some("That name and password do not match.")).into_string(),
            );
    }
    console.throttle.succeeded(&keys);
    let cookie = auth::token();
    let expires_at = now_ms() + console.session.as_millis() as i64;
    let credential = auth::credential(&console.operators, name).unwrap_or_default();
    if let Err(e) = console
        .guard
        .store()
        .open_session(
            &auth::digest(&cookie),
            name,
            &auth::token(),
            expires_at,
            &credential,
        )
        .await
    {
        return internal(e);
    }
    tracing::info!(operator = name, "an operator signed in to the console");
    let max_age = time::Duration::seconds(console.session.as_secs() as i64);
    let mut gone = auth::cookie(auth::SIGN_IN_COOKIE, String::new(), time::Duration::ZERO);
    gone.make_removal();
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, "/"))
        .cookie(auth::cookie(auth::SESSION_COOKIE, cookie, max_age))
        .cookie(gone)
        .finish()
}

pub(super) async fn sign_out(
    req: HttpRequest,
    console: web::Data<Console>,
    form: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    let (digest, session) = match form_operator(&req, &console, &form).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    if let Err(e) = console.guard.store().close_session(&digest).await {
        return internal(e);
    }
    tracing::info!(operator = %session.operator, "an operator signed out");
    let mut gone = auth::cookie(auth::SESSION_COOKIE, String::new(), time::Duration::ZERO);
    gone.make_removal();
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, "/sign-in"))
        .cookie(gone)
        .finish()
}
