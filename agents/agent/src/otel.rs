//! The agent's log output and its OpenTelemetry traces.
//!
//! Logs go to stderr as before (`RUST_LOG`, default `info`). When the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, the spans of
//! [`TARGET`] are also exported over OTLP/HTTP (protobuf, batched on a thread of the SDK's own),
//! as service `lachesis-agent` with the resource attribute `host.id`; the exporter reads the
//! other `OTEL_EXPORTER_OTLP_*` variables (headers, timeout, compression) itself. Each span
//! continues the W3C `traceparent` of what caused it: a desired-state message (its phases
//! quiesce, drain, install, resume and its ack) or a held IO's detour.
//!
//! Without those variables no layer takes [`TARGET`]'s spans: they are never built (the
//! callsites are disabled), and the log lines look as they did.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The target of every span that is exported (the FUSE switch's detour span uses it too, as
/// a literal: that crate does not depend on this one). The log output leaves these spans out.
pub const TARGET: &str = "lachesis::trace";

pub const SERVICE_NAME: &str = "lachesis-agent";

const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];
const PROTOCOL_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
];

/// Flushes and stops the exporter when dropped (at the agent's exit); outside any async
/// runtime, since the exporter's HTTP client blocks.
pub struct Guard(Option<SdkTracerProvider>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            if let Err(e) = p.shutdown() {
                eprintln!("warning: spans not all exported at exit: {e}");
            }
        }
    }
}

/// The OTLP endpoint variable in force, checked: `Ok(None)` when none is set. Read from
/// `env` (the process environment in [`init`]).
pub fn configured(env: impl Fn(&str) -> Option<String>) -> Result<Option<String>, String> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if let Some((name, p)) = PROTOCOL_VARS.iter().find_map(|n| set(n).map(|v| (*n, v))) {
        if p != "http/protobuf" {
            return Err(format!(
                "{name}={p:?}: the agent exports OTLP as http/protobuf only"
            ));
        }
    }
    let Some((name, url)) = ENDPOINT_VARS.iter().find_map(|n| set(n).map(|v| (*n, v))) else {
        return Ok(None);
    };
    match url::Url::parse(url.trim()) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
            Ok(Some(name.to_string()))
        }
        _ => Err(format!(
            "{name}={url:?}: expected an http:// or https:// URL, e.g. http://127.0.0.1:4318"
        )),
    }
}

/// Installs the global subscriber: the log output, and the OTLP exporter when configured.
/// Call before any async runtime starts. An `Err` names the variable that is wrong.
pub fn init(host_id: &str) -> Result<Guard, String> {
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info"))
                .add_directive(format!("{TARGET}=off").parse().expect("a valid directive")),
        );
    let provider = match configured(|n| std::env::var(n).ok())? {
        None => None,
        Some(name) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .build()
                .map_err(|e| format!("{name}: {e}"))?;
            let resource = Resource::builder()
                .with_service_name(SERVICE_NAME)
                .with_attribute(KeyValue::new("host.id", host_id.to_string()))
                .build();
            Some(
                SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(resource)
                    .build(),
            )
        }
    };
    // The spans, and the warnings and errors logged inside them as their events.
    let spans = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("lachesis-agent"))
            .with_filter(
                Targets::new()
                    .with_target(TARGET, LevelFilter::INFO)
                    .with_target("lachesis_agent", LevelFilter::WARN)
                    .with_target("lachesis_fs", LevelFilter::WARN),
            )
    });
    tracing_subscriber::registry().with(logs).with(spans).init();
    Ok(Guard(provider))
}

/// Makes `span` a child of the span `traceparent` names (a W3C trace context from the bus);
/// without one (or with OTel off) it stays as it is.
pub fn continue_trace(span: &Span, traceparent: Option<&str>) {
    let Some(tp) = traceparent else { return };
    if span.is_disabled() {
        return;
    }
    let carrier = HashMap::from([("traceparent".to_string(), tp.to_string())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// The W3C traceparent of `span`, for a message that continues its trace: `None` when the
/// span is not exported (OTel off).
pub fn traceparent_of(span: &Span) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove("traceparent")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |n| {
            vars.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        assert_eq!(configured(env(&[])), Ok(None));
        assert_eq!(
            configured(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])),
            Ok(None)
        );
        assert_eq!(
            configured(env(&[(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://127.0.0.1:4318"
            )])),
            Ok(Some("OTEL_EXPORTER_OTLP_ENDPOINT".into()))
        );
        assert_eq!(
            configured(env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "https://b:4318/v1/traces"
                ),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ])),
            Ok(Some("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT".into()))
        );
    }

    #[test]
    fn bad_settings_name_the_variable() {
        for (name, value) in [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "ftp://collector/v1/traces",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ] {
            let err = configured(env(&[(name, value)])).unwrap_err();
            assert!(err.starts_with(name), "{err}");
        }
    }

    #[test]
    fn spans_off_carry_no_trace_context() {
        let span = tracing::info_span!(target: TARGET, "install");
        continue_trace(
            &span,
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        );
        assert_eq!(traceparent_of(&span), None);
    }
}
