//! What the allocator tells the world: one [`Event`] per trace entry PyTorch would record
//! (`alloc`, `free_requested`, `free_completed`, `segment_alloc`, `segment_free`, `segment_map`,
//! `segment_unmap`, `oom`), in PyTorch's order, handed to an [`EventSink`] as it happens.
//!
//! The sink is a type parameter of the allocator, so an unused sink ([`NoEvents`]) costs nothing.

use serde::Serialize;

use crate::snapshot::Action;

/// One event, as a trace entry would record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Event {
    /// What happened (never `snapshot`, `user_defined` or `unknown`).
    pub action: Action,
    /// Block or segment address. For `oom`: the device's free bytes, as PyTorch's own
    /// `TraceEntry` stores them (the dump writes it as `device_free`).
    pub addr: u64,
    /// Bytes: the request (`alloc`, `free_*`), the segment or mapped range (`segment_*`), the
    /// rounded request (`oom`).
    pub size: u64,
    /// Stream of the block or segment.
    pub stream: u64,
}

/// Where events go.
pub trait EventSink {
    /// Receives one event.
    fn event(&mut self, event: Event);
}

/// Drops every event (the allocator's default sink).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoEvents;

impl EventSink for NoEvents {
    #[inline(always)]
    fn event(&mut self, _: Event) {}
}

impl EventSink for Vec<Event> {
    #[inline]
    fn event(&mut self, event: Event) {
        self.push(event);
    }
}

/// A closure as a sink: `FnSink(|e| println!("{e:?}"))`.
#[derive(Debug, Clone, Copy)]
pub struct FnSink<F>(pub F);

impl<F: FnMut(Event)> EventSink for FnSink<F> {
    #[inline]
    fn event(&mut self, event: Event) {
        (self.0)(event);
    }
}

impl<S: EventSink + ?Sized> EventSink for &mut S {
    #[inline]
    fn event(&mut self, event: Event) {
        (**self).event(event);
    }
}
