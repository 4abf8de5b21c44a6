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
    let max = api.shared.limits.max_message_bytes;
    let (bytes, _held) = read_body(&parts.headers, body, max, Encodings::IdentityOrGzip, api.bodies.as_ref()).await?;
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
            if !incomplete(&request) {
                return Ok(request);
            }
            let request = decode_json_float_strings(bytes)?;
            check_json_data(&request, bytes)?;
            Ok(request)
        }
    }
}

/// Every metric of a request.
fn metrics(
    request: &ExportMetricsServiceRequest,
) -> impl Iterator<Item = &opentelemetry_proto::tonic::metrics::v1::Metric> {
    request.resource_metrics.iter().flat_map(|r| &r.scope_metrics).flat_map(|s| &s.metrics)
}

/// Whether the JSON decoder left a metric without data or a gauge or sum point without a
/// value: it reads both as optional flattened fields, so what it cannot read is absent.
fn incomplete(request: &ExportMetricsServiceRequest) -> bool {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    metrics(request).any(|m| match &m.data {
        None => true,
        Some(Data::Gauge(g)) => g.data_points.iter().any(|p| p.value.is_none()),
        Some(Data::Sum(g)) => g.data_points.iter().any(|p| p.value.is_none()),
        _ => false,
    })
}

/// The proto3 JSON mapping, which OTLP/HTTP JSON follows, lets a `double` be a JSON number or
/// a string: `"NaN"`, `"Infinity"`, `"-Infinity"` (the only way JSON can carry them; a Go
/// client's summary has NaN quantiles before its first observation) or a number in decimal or
/// exponent notation. The upstream decoder takes strings only for quantiles, so a point whose
/// `asDouble` (or a histogram's or summary's `sum`, `min`, `max`) is a string would leave its
/// metric without data. Such strings are read here: finite ones become JSON numbers, the
/// others are decoded as 0 and set to their value afterwards, so a NaN point is rejected per
/// series (`non_finite_value`) exactly as the same point sent as protobuf. A string that is no
/// number refuses the request (400) naming the point. Runs only when the fast decode left a
/// metric without data or a point without a value.
fn decode_json_float_strings(bytes: &[u8]) -> Result<ExportMetricsServiceRequest, Status> {
    let malformed =
        |e: String| Status::invalid_argument(format!("malformed ExportMetricsServiceRequest (OTLP JSON): {e}"));
    let mut value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| malformed(e.to_string()))?;
    let mut specials = Vec::new();
    let mut bad = None;
    for_each_data_point(&mut value, |at, name, kind, point| {
        // An `asInt` past int64 was dropped by the decoder, and the point then had "no value".
        if let Some(v) = point.get("asInt") {
            let fits = v.as_i64().is_some() || v.as_str().is_some_and(|t| t.parse::<i64>().is_ok());
            if !fits {
                let (r, s, m, p) = at;
                bad.get_or_insert_with(|| {
                    format!(
                        "resourceMetrics[{r}].scopeMetrics[{s}].metrics[{m}] ({name:?}).{kind}.dataPoints[{p}].\
                         asInt: {v} is not an int64 (-9223372036854775808 to 9223372036854775807)"
                    )
                });
            }
        }
        for field in POINT_DOUBLES {
            let Some(slot) = point.get_mut(*field) else { continue };
            let Some(text) = slot.as_str() else { continue };
            let parsed = match text {
                "NaN" => f64::NAN,
                "Infinity" => f64::INFINITY,
                "-Infinity" => f64::NEG_INFINITY,
                other => match other.parse::<f64>() {
                    Ok(v) if v.is_finite() => v,
                    _ => {
                        let (r, s, m, p) = at;
                        bad.get_or_insert_with(|| {
                            format!(
                                "resourceMetrics[{r}].scopeMetrics[{s}].metrics[{m}] ({name:?}).{kind}.dataPoints[{p}].\
                                 {field}: {other:?} is not a number (a double is a JSON number or a string \
                                 holding one, \"NaN\", \"Infinity\" or \"-Infinity\")"
                            )
                        });
                        continue;
                    }
                },
            };
            if let Some(n) = serde_json::Number::from_f64(parsed) {
                *slot = serde_json::Value::Number(n);
            } else {
                *slot = serde_json::Value::from(0.0);
                specials.push((at, kind, *field, parsed));
            }
        }
        // Exemplars are not stored; a string value there must not fail the point.
        if let Some(exemplars) = point.get_mut("exemplars").and_then(|e| e.as_array_mut()) {
            for e in exemplars {
                if let Some(slot) = e.get_mut("asDouble").filter(|v| v.is_string()) {
                    *slot = serde_json::Value::from(0.0);
                }
            }
        }
    });
    if let Some(bad) = bad {
        return Err(malformed(bad));
    }
    let mut request: ExportMetricsServiceRequest =
        serde_json::from_value(value).map_err(|e| malformed(e.to_string()))?;
    for ((r, s, m, p), kind, field, v) in specials {
        set_point_double(&mut request, (r, s, m, p), kind, field, v);
    }
    Ok(request)
}

/// The `double` fields of data points the upstream JSON decoder reads only as numbers.
const POINT_DOUBLES: &[&str] = &["asDouble", "sum", "min", "max"];

/// Where a data point is: resource, scope, metric and point index.
type PointAt = (usize, usize, usize, usize);

/// Calls `f` on every data point object of an OTLP JSON request, with where it is, its
/// metric's name and the data field it sits under (`gauge`, `sum`, …).
fn for_each_data_point(
    value: &mut serde_json::Value,
    mut f: impl FnMut(PointAt, &str, &'static str, &mut serde_json::Value),
) {
    fn list<'a>(v: &'a mut serde_json::Value, key: &str) -> &'a mut [serde_json::Value] {
        v.get_mut(key).and_then(|l| l.as_array_mut()).map_or(&mut [], |l| l.as_mut_slice())
    }
    for (r, resource) in list(value, "resourceMetrics").iter_mut().enumerate() {
        for (s, scope) in list(resource, "scopeMetrics").iter_mut().enumerate() {
            for (m, metric) in list(scope, "metrics").iter_mut().enumerate() {
                let name = metric.get("name").and_then(|n| n.as_str()).unwrap_or("").to_owned();
                for kind in ["gauge", "sum", "histogram", "exponentialHistogram", "summary"] {
                    let Some(data) = metric.get_mut(kind) else { continue };
                    for (p, point) in list(data, "dataPoints").iter_mut().enumerate() {
                        f((r, s, m, p), &name, kind, point);
                    }
                }
            }
        }
    }
}

/// Sets one `double` field of a decoded data point (see [`decode_json_float_strings`]).
fn set_point_double(request: &mut ExportMetricsServiceRequest, at: PointAt, kind: &str, field: &str, v: f64) {
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point};
    /// A histogram's `sum`, `min` or `max`.
    fn pick<'a>(
        field: &str,
        sum: &'a mut Option<f64>,
        min: &'a mut Option<f64>,
        max: &'a mut Option<f64>,
    ) -> Option<&'a mut Option<f64>> {
        match field {
            "sum" => Some(sum),
            "min" => Some(min),
            "max" => Some(max),
            _ => None,
        }
    }
    let (r, s, m, p) = at;
    let Some(data) = request
        .resource_metrics
        .get_mut(r)
        .and_then(|x| x.scope_metrics.get_mut(s))
        .and_then(|x| x.metrics.get_mut(m))
        .and_then(|x| x.data.as_mut())
    else {
        return;
    };
    let value = Some(number_data_point::Value::AsDouble(v));
    match (data, kind, field) {
        (Data::Gauge(g), "gauge", "asDouble") => g.data_points.get_mut(p).into_iter().for_each(|x| x.value = value),
        (Data::Sum(g), "sum", "asDouble") => g.data_points.get_mut(p).into_iter().for_each(|x| x.value = value),
        (Data::Histogram(h), "histogram", _) => {
            let x = h.data_points.get_mut(p);
            x.and_then(|x| pick(field, &mut x.sum, &mut x.min, &mut x.max)).into_iter().for_each(|f| *f = Some(v));
        }
        (Data::ExponentialHistogram(h), "exponentialHistogram", _) => {
            let x = h.data_points.get_mut(p);
            x.and_then(|x| pick(field, &mut x.sum, &mut x.min, &mut x.max)).into_iter().for_each(|f| *f = Some(v));
        }
        (Data::Summary(h), "summary", "sum") => h.data_points.get_mut(p).into_iter().for_each(|x| x.sum = v),
        _ => {}
    }
}

/// The OTLP JSON decoder reads a metric's data (`gauge`, `sum`, …) as an optional flattened
/// field, so a data point it cannot decode (`"timeUnixNano": 1.7e18`, `"asDouble": "high"`)
/// leaves the metric without data instead of failing: the whole metric would be dropped and
/// counted as one rejected point. A metric left without data whose JSON has a data field is
/// therefore decoded again on its own, and the request refused (400, as the OTLP/HTTP
/// specification asks of a request that cannot be decoded) with that error and where it is.
fn check_json_data(request: &ExportMetricsServiceRequest, bytes: &[u8]) -> Result<(), Status> {
    use opentelemetry_proto::tonic::metrics::v1 as m;
    if metrics(request).all(|m| m.data.is_some()) {
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
                        let (point, e) = failing_point(key, data).unwrap_or_else(|| (String::new(), e.to_string()));
                        return Err(malformed(format!("{at}.{key}{point}: {e}")));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Where in a metric's `data` (of kind `key`) decoding fails: `.dataPoints[i]` and, where
/// one field alone is the cause (the point decodes without it), `.field`, with the error.
fn failing_point(key: &str, data: &serde_json::Value) -> Option<(String, String)> {
    use opentelemetry_proto::tonic::metrics::v1 as m;
    let decode = |v: &serde_json::Value| -> Option<String> {
        let v = v.clone();
        match key {
            "gauge" | "sum" => serde_json::from_value::<m::NumberDataPoint>(v).err(),
            "histogram" => serde_json::from_value::<m::HistogramDataPoint>(v).err(),
            "exponentialHistogram" => serde_json::from_value::<m::ExponentialHistogramDataPoint>(v).err(),
            "summary" => serde_json::from_value::<m::SummaryDataPoint>(v).err(),
            _ => None,
        }
        .map(|e| e.to_string())
    };
    let points = data.get("dataPoints")?.as_array()?;
    points.iter().enumerate().find_map(|(i, point)| {
        let error = decode(point)?;
        let field = point.as_object().and_then(|fields| {
            fields.keys().find(|k| {
                let mut without = fields.clone();
                without.remove(*k);
                decode(&serde_json::Value::Object(without)).is_none()
            })
        });
        Some((field.map_or_else(|| format!(".dataPoints[{i}]"), |f| format!(".dataPoints[{i}].{f}")), error))
    })
}

#[cfg(test)]
mod tests;
