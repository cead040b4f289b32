//! Error answers: `{"error":"<message>"}` with `Content-Type:
//! application/json`, the texts the spec and the wire contract give.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::auth::AuthError;
use crate::ingress::AcceptError;
use crate::ingress::batch::BatchBodyError;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    /// The status.
    pub status: StatusCode,
    /// The `error` text.
    pub message: String,
    /// `WWW-Authenticate` on a `401`.
    pub challenge: bool,
    /// `Retry-After`, in seconds.
    pub retry_after_seconds: Option<u32>,
}

impl ApiError {
    /// An answer with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            challenge: false,
            retry_after_seconds: None,
        }
    }

    /// `400` with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message });
        let mut text = body.to_string();
        text.push('\n');
        let mut response = (self.status, text).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.challenge {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Basic realm="narad""#),
            );
        }
        if let Some(seconds) = self.retry_after_seconds {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl From<AuthError> for ApiError {
    fn from(error: AuthError) -> Self {
        let status = match error {
            AuthError::Unauthenticated => StatusCode::UNAUTHORIZED,
            AuthError::Throttled => StatusCode::TOO_MANY_REQUESTS,
            AuthError::Unavailable => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self {
            status,
            message: error.to_string(),
            challenge: error == AuthError::Unauthenticated,
            retry_after_seconds: None,
        }
    }
}

/// The status a refused produce answers with.
pub fn accept_status(error: &AcceptError) -> StatusCode {
    match error {
        AcceptError::TopicNotFound => StatusCode::NOT_FOUND,
        AcceptError::DelayedChild | AcceptError::RemoteChild { .. } => StatusCode::CONFLICT,
        AcceptError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        AcceptError::Wal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        AcceptError::SchemaBusy => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_REQUEST,
    }
}

impl From<AcceptError> for ApiError {
    fn from(error: AcceptError) -> Self {
        if let AcceptError::Wal(cause) = &error {
            tracing::error!(error = %cause, "http server error: ingress WAL append failed");
            return Self::new(StatusCode::INTERNAL_SERVER_ERROR, "produce failed");
        }
        Self::new(accept_status(&error), error.to_string())
    }
}

impl From<BatchBodyError> for ApiError {
    fn from(error: BatchBodyError) -> Self {
        let status = match &error {
            BatchBodyError::UnsupportedEncoding(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            BatchBodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BatchBodyError::Message { error, .. } => accept_status(error),
            _ => StatusCode::BAD_REQUEST,
        };
        Self::new(status, error.to_string())
    }
}
