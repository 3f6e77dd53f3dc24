//! Logging on stderr: `-v` (debug), `-vv` (trace), or a `DPM_LOG` filter,
//! a comma-separated list of `target=level` and `level` such as
//! `dpm_daemon=trace,warn` (tracing-subscriber's `Targets`, parsed without
//! regex); warnings and errors only by default, and when `DPM_LOG` does not
//! parse.
//!
//! What a user sees by default is one style, dpm's own: `dpm: warning: …`
//! and `dpm: error: …` lines ([`Plain`]: no timestamp, level column or
//! span fields; an event's own fields follow the message in parentheses),
//! like the lines dpm prints itself. `-v` or `DPM_LOG` asks for the
//! diagnostic format: timestamps, levels, spans (`node{node=0 host=…}`).
//!
//! The default is the common case (every `dpm run`, every cleaner), and
//! most such processes log nothing at all, so its subscriber is built at
//! its first warning ([`WarningsOnly`]): a process that says nothing never
//! parses a filter nor allocates `tracing-subscriber`'s span registry
//! (measured on a booted `dpm run -n 1 /bin/true`: docs/benchmarks.md,
//! "The booted path"). What it prints, when it prints, is the same as the
//! filtered subscriber's.

use std::io::IsTerminal;
use std::sync::OnceLock;

use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{span, Event, Level, Metadata, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Install this process's logging (once; a second call changes nothing).
pub(crate) fn init(verbose: u8) {
    let custom = std::env::var("DPM_LOG").ok().and_then(|f| f.parse::<Targets>().ok());
    let filter = match (custom, verbose) {
        (Some(filter), _) => filter,
        (None, 0) => {
            let _ = WarningsOnly::default().try_init();
            return;
        }
        (None, 1) => Targets::new().with_default(LevelFilter::DEBUG),
        (None, _) => Targets::new().with_default(LevelFilter::TRACE),
    };
    // The builder's own ceiling (INFO unless set) would sit under the
    // filter: open it, so that the filter alone decides.
    let _ = formatted().with_max_level(LevelFilter::TRACE).finish().with(filter).try_init();
}

/// The format every subscriber here writes: stderr, colours on a terminal,
/// no target.
fn formatted() -> tracing_subscriber::fmt::SubscriberBuilder<
    tracing_subscriber::fmt::format::DefaultFields,
    tracing_subscriber::fmt::format::Format,
    LevelFilter,
    fn() -> std::io::Stderr,
> {
    tracing_subscriber::fmt().with_writer(std::io::stderr as fn() -> std::io::Stderr).with_ansi(std::io::stderr().is_terminal()).with_target(false)
}

/// Warnings and errors, formatted by a subscriber built at the first of
/// them: callsites below `WARN` are never enabled, so nothing else reaches
/// it.
#[derive(Default)]
struct WarningsOnly {
    inner: OnceLock<Box<dyn Subscriber + Send + Sync>>,
}

impl WarningsOnly {
    fn inner(&self) -> &(dyn Subscriber + Send + Sync) {
        self.inner
            .get_or_init(|| {
                Box::new(
                    tracing_subscriber::fmt()
                        .with_writer(std::io::stderr as fn() -> std::io::Stderr)
                        .with_ansi(false)
                        .event_format(Plain)
                        .with_max_level(Level::WARN)
                        .finish(),
                )
            })
            .as_ref()
    }
}

/// dpm's own style for what it tells a user: `dpm: warning: MESSAGE` /
/// `dpm: error: MESSAGE`, then the event's fields, if any, as
/// `(key value, …)` (a value that already starts with its key's name, such
/// as `job=job 1`, alone). Spans are not shown.
pub(crate) struct Plain;

/// An event's message and its other fields, as text.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<String>,
}

impl Fields {
    fn push(&mut self, field: &tracing::field::Field, value: String) {
        if field.name() == "message" {
            self.message = value;
        } else if value.starts_with(field.name()) {
            self.rest.push(value);
        } else {
            self.rest.push(format!("{} {value}", field.name()));
        }
    }
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.push(field, value.to_string());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.push(field, format!("{value:?}"));
    }
}

impl Plain {
    /// The line for an event of `level` with these fields (no newline).
    fn line(level: Level, fields: Fields) -> String {
        let level = match level {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "note",
            _ => "debug",
        };
        let mut line = format!("dpm: {level}: {}", fields.message);
        if !fields.rest.is_empty() {
            line.push_str(&format!(" ({})", fields.rest.join(", ")));
        }
        line
    }
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        writeln!(writer, "{}", Plain::line(*event.metadata().level(), fields))
    }
}

/// `WARN` and `ERROR` (the less verbose levels compare lower).
fn wanted(meta: &Metadata<'_>) -> bool {
    *meta.level() <= Level::WARN
}

impl Subscriber for WarningsOnly {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if wanted(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        wanted(meta)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::WARN)
    }

    fn new_span(&self, span: &span::Attributes<'_>) -> span::Id {
        self.inner().new_span(span)
    }

    fn record(&self, span: &span::Id, values: &span::Record<'_>) {
        self.inner().record(span, values);
    }

    fn record_follows_from(&self, span: &span::Id, follows: &span::Id) {
        self.inner().record_follows_from(span, follows);
    }

    fn event(&self, event: &Event<'_>) {
        self.inner().event(event);
    }

    fn enter(&self, span: &span::Id) {
        self.inner().enter(span);
    }

    fn exit(&self, span: &span::Id) {
        self.inner().exit(span);
    }

    fn clone_span(&self, id: &span::Id) -> span::Id {
        self.inner().clone_span(id)
    }

    fn try_close(&self, id: span::Id) -> bool {
        self.inner().try_close(id)
    }

    fn current_span(&self) -> tracing_core::span::Current {
        // No span exists before the inner subscriber does.
        self.inner.get().map_or_else(tracing_core::span::Current::none, |inner| inner.current_span())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_warnings_and_errors_are_wanted_and_nothing_is_built_until_one_comes() {
        let lazy = WarningsOnly::default();
        let dispatch = tracing::Dispatch::new(lazy);
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info!("not wanted");
            tracing::debug!("not wanted either");
        });
        let lazy = dispatch.downcast_ref::<WarningsOnly>().expect("the dispatch holds it");
        assert!(lazy.inner.get().is_none(), "no warning came: nothing was built");
        tracing::dispatcher::with_default(&dispatch, || tracing::warn!("a warning"));
        assert!(lazy.inner.get().is_some(), "the first warning builds the subscriber");
        assert_eq!(lazy.max_level_hint(), Some(LevelFilter::WARN));
    }

    #[test]
    fn a_plain_line_is_dpms_style_with_the_events_fields_after_the_message() {
        let f = Fields { message: "a rank's PMI connection closed".into(), rest: vec!["job 1".into(), "rank 0".into()] };
        assert_eq!(Plain::line(Level::WARN, f), "dpm: warning: a rank's PMI connection closed (job 1, rank 0)");
        let f = Fields { message: "cannot serve PMIx".into(), rest: Vec::new() };
        assert_eq!(Plain::line(Level::ERROR, f), "dpm: error: cannot serve PMIx");
    }
}
