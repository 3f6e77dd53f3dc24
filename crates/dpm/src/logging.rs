//! Logging on stderr: `-v` (debug), `-vv` (trace), or a `DPM_LOG` filter,
//! a comma-separated list of `target=level` and `level` such as
//! `dpm_daemon=trace,warn` (tracing-subscriber's `Targets`, parsed without
//! regex); warnings and errors only by default, and when `DPM_LOG` does not
//! parse.
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
        self.inner.get_or_init(|| Box::new(formatted().with_max_level(Level::WARN).finish())).as_ref()
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
}
