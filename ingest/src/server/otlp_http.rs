//! OTLP over HTTP: `POST /v1/metrics` with an `ExportMetricsServiceRequest` as binary protobuf
//! (`application/x-protobuf`) or as OTLP JSON (`application/json`), optionally gzip-compressed
//! — what the OTel SDKs' `otlphttp` exporters and the Collector's `otlphttp` exporter send.
//!
//! The request goes through the same conversion, limits and durable write path as OTLP/gRPC
//! (`super::otlp`). The answer follows the OTLP/HTTP specification: 200 with an
//! `ExportMetricsServiceResponse` (with `partial_success` when some points were rejected) in
//! the request's encoding; on failure a `google.rpc.Status` in the request's encoding, with
//! 400/401/403/413/415 for what a retry cannot fix and 503 plus `Retry-After` for overload,
//! which the exporters retry.

use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use tonic::Status;

use super::auth::Role;
use super::http::{Body, Encodings, HttpApi, http_code, media_type, method_not_allowed, read_body, with_retry_after};

/// The path OTLP/HTTP exporters post metrics to.
pub const METRICS_PATH: &str = "/v1/metrics";

/// The two OTLP/HTTP encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// `google.rpc.Status`, the error body of OTLP/HTTP (details are never sent).
#[derive(Clone, PartialEq, prost::Message, serde::Serialize)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

fn respond(code: StatusCode, encoding: Encoding, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Body::new(Bytes::from(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(encoding.content_type()));
    r
}

fn error(status: &Status, encoding: Encoding, retry_after_ms: u64) -> Response<Body> {
    let body = RpcStatus { code: status.code() as i32, message: status.message().to_string() };
    let bytes = match encoding {
        Encoding::Protobuf => prost::Message::encode_to_vec(&body),
        Encoding::Json => serde_json::to_vec(&body).unwrap_or_default(),
    };
    with_retry_after(respond(http_code(status.code()), encoding, bytes), retry_after_ms)
}

/// Handles `POST /v1/metrics`; never fails (errors are responses).
pub(crate) async fn handle(api: &HttpApi, request: Request<Incoming>) -> Response<Body> {
    if request.method() != Method::POST {
        return method_not_allowed("POST");
    }
    let retry = api.shared.limits.retry_after_ms;
    let encoding = match media_type(request.headers()).as_deref() {
        Some("application/x-protobuf") => Encoding::Protobuf,
        Some("application/json") => Encoding::Json,
        other => {
            let status = Status::unimplemented(format!(
                "Content-Type {:?} is not supported; OTLP/HTTP sends application/x-protobuf or application/json",
                other.unwrap_or("")
            ));
            let _ = api.shared.telemetry.finish::<()>(Err(status.clone()));
            return error(&status, Encoding::Protobuf, retry);
        }
    };
    let telemetry = api.shared.telemetry.clone();
    match telemetry.finish(export(api, request, encoding).await) {
        Ok(response) => {
            let bytes = match encoding {
                Encoding::Protobuf => prost::Message::encode_to_vec(&response),
                Encoding::Json => serde_json::to_vec(&response).unwrap_or_else(|_| b"{}".to_vec()),
            };
            respond(StatusCode::OK, encoding, bytes)
        }
        Err(status) => error(&status, encoding, retry),
    }
}

async fn export(
    api: &HttpApi,
    request: Request<Incoming>,
    encoding: Encoding,
) -> Result<ExportMetricsServiceResponse, Status> {
    let (parts, body) = request.into_parts();
    api.authorize(&parts.headers, Role::Write, "OTLP/HTTP metrics")?;
    let bytes = read_body(&parts.headers, body, api.shared.limits.max_message_bytes, Encodings::IdentityOrGzip).await?;
    let request = decode(&bytes, encoding)?;
    api.otlp.export_inner(request).await
}

/// Decodes an export request in either encoding.
fn decode(bytes: &[u8], encoding: Encoding) -> Result<ExportMetricsServiceRequest, Status> {
    match encoding {
        Encoding::Protobuf => prost::Message::decode(bytes)
            .map_err(|e| Status::invalid_argument(format!("malformed ExportMetricsServiceRequest (protobuf): {e}"))),
        Encoding::Json => {
            let request: ExportMetricsServiceRequest = serde_json::from_slice(bytes).map_err(|e| {
                Status::invalid_argument(format!("malformed ExportMetricsServiceRequest (OTLP JSON): {e}"))
            })?;
            check_json_data(&request, bytes)?;
            Ok(request)
        }
    }
}

/// The OTLP JSON decoder reads a metric's data (`gauge`, `sum`, …) as an optional flattened
/// field, so a data point it cannot decode (`"timeUnixNano": 1.7e18`, `"asDouble": "NaN"`)
/// leaves the metric without data instead of failing: the whole metric would be dropped and
/// counted as one rejected point. A metric left without data whose JSON has a data field is
/// therefore decoded again on its own, and the request refused (400, as the OTLP/HTTP
/// specification asks of a request that cannot be decoded) with that error and where it is.
fn check_json_data(request: &ExportMetricsServiceRequest, bytes: &[u8]) -> Result<(), Status> {
    use opentelemetry_proto::tonic::metrics::v1 as m;
    let no_data = |r: &ExportMetricsServiceRequest| {
        r.resource_metrics.iter().flat_map(|r| &r.scope_metrics).flat_map(|s| &s.metrics).any(|m| m.data.is_none())
    };
    if !no_data(request) {
        return Ok(());
    }
    let malformed =
        |e: String| Status::invalid_argument(format!("malformed ExportMetricsServiceRequest (OTLP JSON): {e}"));
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| malformed(e.to_string()))?;
    let list = |v: &serde_json::Value, key: &str| v.get(key).and_then(|l| l.as_array()).cloned().unwrap_or_default();
    for (r, resource) in list(&value, "resourceMetrics").iter().enumerate() {
        for (s, scope) in list(resource, "scopeMetrics").iter().enumerate() {
            for (i, metric) in list(scope, "metrics").iter().enumerate() {
                let name = metric.get("name").and_then(|n| n.as_str()).unwrap_or("");
                let at = format!("resourceMetrics[{r}].scopeMetrics[{s}].metrics[{i}] ({name:?})");
                let Some(object) = metric.as_object() else { continue };
                for (key, data) in object {
                    let decoded = match key.as_str() {
                        "gauge" => serde_json::from_value::<m::Gauge>(data.clone()).map(drop),
                        "sum" => serde_json::from_value::<m::Sum>(data.clone()).map(drop),
                        "histogram" => serde_json::from_value::<m::Histogram>(data.clone()).map(drop),
                        "exponentialHistogram" => {
                            serde_json::from_value::<m::ExponentialHistogram>(data.clone()).map(drop)
                        }
                        "summary" => serde_json::from_value::<m::Summary>(data.clone()).map(drop),
                        _ => Ok(()),
                    };
                    if let Err(e) = decoded {
                        return Err(malformed(format!("{at}.{key}: {e}")));
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
