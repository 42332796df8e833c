//! The IO verbs: find an IO's rule (holding it while its flow is quiesced or the controller
//! decides), then read, write, sync and close through its route, whole blocks at a time.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use lachesis_switch::{Admitted, Gate, IoHeader, Op};

use super::endpoints::End;
use super::{Compiled, FileCtx, Switch};
use crate::detour::DetourHeader;
use crate::route::Route;
use crate::stage::{Backend, Chain, Stage};

impl Switch {
    pub(super) fn lookup(
        &self,
        ctx: &FileCtx,
        op: Op,
        off: u64,
        len: u64,
    ) -> (Option<String>, Arc<Route>) {
        self.lookup_in(&self.current(), ctx, op, off, len)
    }

    fn lookup_in(
        &self,
        c: &Compiled,
        ctx: &FileCtx,
        op: Op,
        off: u64,
        len: u64,
    ) -> (Option<String>, Arc<Route>) {
        let h = IoHeader {
            tenant: ctx.tenant.as_deref(),
            op,
            path: Some(&ctx.path),
            offset: off,
            length: len,
            key: None,
        };
        match c.table.lookup(&h) {
            Some(rule) => (
                Some(rule.name.clone()),
                c.routes.get(&rule.name).expect("compiled").clone(),
            ),
            None => (None, self.plain.clone()),
        }
    }

    /// The rule and route of an IO, once the controller let it go if the rule asks it first
    /// (`crate::detour`). The hold comes before the gate: a held IO is not in flight. After a
    /// verdict the IO is matched again against the rules in force then; the rule that let it
    /// go is not asked again for this IO.
    fn lookup_held(
        &self,
        ctx: &FileCtx,
        op: Op,
        off: u64,
        len: u64,
    ) -> io::Result<(Option<String>, Arc<Route>)> {
        let mut let_go: Option<String> = None;
        let mut logged: Option<String> = None;
        loop {
            let c = self.current();
            let (flow, route) = self.lookup_in(&c, ctx, op, off, len);
            let Some(rule) = &flow else {
                return Ok((flow, route));
            };
            // Header logs come before any hold: an IO the controller then denies or times
            // out was still attempted, which is what an audit log records. Matched again
            // after a verdict, it is logged again only if it now matches another rule.
            if logged.as_ref() != Some(rule) {
                for log in &route.header_logs {
                    log.append(rule, ctx.tenant.as_deref(), op, &ctx.path, off, len);
                }
                logged = flow.clone();
            }
            let Some(detours) = &self.detours else {
                return Ok((flow, route));
            };
            let header = |target: &str, hold: bool| DetourHeader {
                rule: rule.clone(),
                target: target.to_string(),
                tenant: ctx.tenant.clone(),
                op,
                path: ctx.path.clone(),
                offset: off,
                length: len,
                hold,
            };
            match &route.ask {
                Some(target) if let_go.as_ref() != Some(rule) => {
                    detours.hold(header(target, true), c.generation)?;
                    let_go = flow.clone();
                }
                _ => {
                    for target in &route.copies {
                        detours.copy(header(target, false));
                    }
                    return Ok((flow, route));
                }
            }
        }
    }

    /// A read of a delegated range skips the rules (it follows its delegate), but the rule
    /// it matches still logs its header if it says so: an audit log must not miss reads of
    /// the ranges its flow wrote.
    fn log_delegated_read(&self, ctx: &FileCtx, off: u64, len: u64) {
        if let (Some(rule), route) = self.lookup(ctx, Op::Read, off, len) {
            for log in &route.header_logs {
                log.append(&rule, ctx.tenant.as_deref(), Op::Read, &ctx.path, off, len);
            }
        }
    }

    fn observe(&self, ctx: &FileCtx, off: u64, len: u64) {
        if let (Some(o), Some(t)) = (self.observer.get(), ctx.tenant.as_deref()) {
            o(t, ctx.id, off, len);
        }
    }

    /// Reads at `off`, up to the file's size.
    pub fn read(&self, ctx: &FileCtx, buf: &mut [u8], off: u64) -> io::Result<usize> {
        loop {
            if let Some(n) = self.try_read(ctx, buf, off)? {
                return Ok(n);
            }
        }
    }

    /// One attempt of [`Switch::read`]: `None` when a flow of the range was quiesced; the
    /// attempt then waited for its resume holding no lock, and the read starts again. A read
    /// held at the gate must not keep its block locks: a truncate or write behind them would
    /// hold `held`, which the install that resumes the flow needs (a deadlock that no
    /// timeout ends, with the reader stuck in the kernel).
    fn try_read(&self, ctx: &FileCtx, buf: &mut [u8], off: u64) -> io::Result<Option<usize>> {
        let size = ctx.backing.metadata()?.len();
        if off >= size {
            return Ok(Some(0));
        }
        let len = buf.len().min((size - off) as usize);
        let buf = &mut buf[..len];
        let end = off + len as u64;
        // Held across the delegate lookup too: a concurrent write moves both bytes and route.
        let blocks = self.blocks.read(ctx.id, off, len as u64);
        let segs = self
            .delegates
            .segments(&ctx.path, off, end)
            .unwrap_or_else(|| vec![(off, end, None)]);
        // Every piece admitted before any is read.
        let mut pieces = Vec::with_capacity(segs.len());
        for (s, e, delegated) in segs {
            let piece = match delegated {
                // Written ranges are read where they were written, from the primary.
                Some(route) => Piece::Delegated(route),
                None => {
                    let (flow, route) = self.lookup_held(ctx, Op::Read, s, e - s)?;
                    let admitted = match flow {
                        None => Gate::admit(&self.gates, None),
                        Some(flow) => match Gate::try_admit(&self.gates, flow.clone()) {
                            Some(admitted) => admitted,
                            None => {
                                drop((pieces, blocks));
                                Gate::wait_while_held(&self.gates, flow);
                                return Ok(None);
                            }
                        },
                    };
                    Piece::Routed(route, admitted)
                }
            };
            pieces.push((s, e, piece));
        }
        self.observe(ctx, off, len as u64);
        for (s, e, piece) in &pieces {
            let piece_buf = &mut buf[(s - off) as usize..(e - off) as usize];
            let n = match piece {
                Piece::Delegated(route) => {
                    self.log_delegated_read(ctx, *s, e - s);
                    self.run_read(ctx, route, 0, piece_buf, *s)?
                }
                Piece::Routed(route, _admitted) => {
                    // A read set of several replicas spreads reads over all of them.
                    let from = match route.endpoints.len() {
                        0 | 1 => 0,
                        n => self.read_rr.fetch_add(1, Ordering::Relaxed) % n,
                    };
                    self.run_read(ctx, route, from, piece_buf, *s)?
                }
            };
            // Inside the file's size a short read is a hole.
            piece_buf[n..].fill(0);
        }
        drop(pieces);
        self.user_read.fetch_add(len as u64, Ordering::Relaxed);
        if let Some(w) = self.read_watch.get() {
            w.read(ctx, off, buf);
        }
        drop(blocks);
        Ok(Some(len))
    }

    fn run_read(
        &self,
        ctx: &FileCtx,
        route: &Route,
        from: usize,
        buf: &mut [u8],
        off: u64,
    ) -> io::Result<usize> {
        let end = End {
            sw: self,
            ctx,
            route,
            read_from: from,
        };
        Chain {
            stages: &route.stages,
            end: &end,
        }
        .read_at(ctx.id, buf, off)
    }

    pub fn write(&self, ctx: &FileCtx, data: &[u8], off: u64) -> io::Result<()> {
        let len = data.len() as u64;
        self.user_written.fetch_add(len, Ordering::Relaxed);
        self.observe(ctx, off, len);
        let (flow, route) = self.lookup_held(ctx, Op::Write, off, len)?;
        let _admitted = Gate::admit(&self.gates, flow);
        if !route.is_plain() {
            // The backing file keeps the namespace's size, wherever the bytes go.
            let size = ctx.backing.metadata()?.len();
            if off + len > size {
                ctx.backing.set_len(off + len)?;
            }
        }
        let end = End {
            sw: self,
            ctx,
            route: &route,
            read_from: 0,
        };
        let chain = Chain {
            stages: &route.stages,
            end: &end,
        };
        // Until its data is in the stage, known as a file a stage holds data of.
        let _held = route.holds_data().then(|| self.hold(ctx));
        // Until the delegate is recorded: readers see the old bytes where they were or the
        // new ones where they now are.
        let _blocks = self.blocks.write(ctx.id, off, len);
        {
            let _order = (route.endpoints.len() > 1).then(|| {
                self.stripes[(ctx.id % self.stripes.len() as u64) as usize]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
            });
            chain.write_at(ctx.id, data, off)?;
        }
        // Other routes' stages may cache these bytes: they are stale now.
        for s in &self.current().stages {
            if !route.stages.iter().any(|r| Arc::ptr_eq(r, s)) {
                s.invalidate(ctx.id, off, len);
            }
        }
        self.delegates.record(&ctx.path, off, off + len, &route)?;
        drop((_blocks, _held));
        // A stage still over its dirty limit (other files' data): every file's goes on. This
        // write is done; a failure here leaves the data dirty, to go on later.
        for s in &route.stages {
            if s.over_dirty_limit() {
                if let Err(e) = self.write_back_stage(s) {
                    tracing::warn!(path = ctx.path, "writing back over the dirty limit: {e}");
                }
            }
        }
        Ok(())
    }

    /// Makes the file durable on every route that may hold its bytes.
    pub fn sync(&self, ctx: &FileCtx) -> io::Result<()> {
        // A route without endpoints ends at the backing file, and every stage's sync ends in
        // its next's (`Stage::sync`), so its chain has synced the backing file already: a
        // second fdatasync would find nothing dirty yet still flush the disk's cache.
        let mut backing_synced = false;
        for route in &self.routes_of(ctx) {
            let end = End {
                sw: self,
                ctx,
                route,
                read_from: 0,
            };
            Chain {
                stages: &route.stages,
                end: &end,
            }
            .sync(ctx.id)?;
            backing_synced |= route.endpoints.is_empty();
        }
        if !backing_synced {
            ctx.backing.sync_data()?;
        }
        // Journals after the data they point at.
        self.delegates.sync()
    }

    /// A handle of the file was closed: stages that hold data write it back, so the bytes
    /// reach their endpoint even if the file is next opened with passthrough.
    pub fn closed(&self, ctx: &FileCtx) -> io::Result<()> {
        if self.current().stages.iter().any(|s| s.holds_data()) {
            self.sync(ctx)?;
            self.prune_held_of(Some(ctx.id));
        }
        Ok(())
    }

    /// Background write-back (the flusher): stages holding data of this file for longer
    /// than `max_age` write it on to the rest of its routes, without a sync. Not gated by
    /// quiesce, like sync: the bytes were acknowledged before the flow was held.
    pub fn flush_expired(&self, ctx: &FileCtx, max_age: Duration) -> io::Result<()> {
        if !self.current().stages.iter().any(|s| s.holds_data()) {
            return Ok(());
        }
        self.each_stage_of_routes(ctx, |s, next| s.flush_expired(ctx.id, max_age, next))
    }

    /// Runs `f` on every stage of every route of the file (its write route and those its
    /// delegates point at), in route order, with the rest of the route after the stage: a
    /// stage's write-back may fill the next one.
    pub(super) fn each_stage_of_routes(
        &self,
        ctx: &FileCtx,
        mut f: impl FnMut(&Arc<dyn Stage>, &Chain) -> io::Result<()>,
    ) -> io::Result<()> {
        for route in self.routes_of(ctx) {
            let end = End {
                sw: self,
                ctx,
                route: &route,
                read_from: 0,
            };
            for (i, s) in route.stages.iter().enumerate() {
                let next = Chain {
                    stages: &route.stages[i + 1..],
                    end: &end,
                };
                f(s, &next)?;
            }
        }
        Ok(())
    }

    /// The file's current write route and every route a delegate of it points at.
    pub(super) fn routes_of(&self, ctx: &FileCtx) -> Vec<Arc<Route>> {
        let mut routes = vec![self.lookup(ctx, Op::Write, 0, u64::MAX).1];
        if let Some(segs) = self.delegates.segments(&ctx.path, 0, u64::MAX) {
            for r in segs.into_iter().filter_map(|s| s.2) {
                if !routes.iter().any(|x| Arc::ptr_eq(x, &r)) {
                    routes.push(r);
                }
            }
        }
        routes
    }
}

/// A piece of a read: a range a delegate says where it was written, or one its rule routes
/// (admitted at its flow's gate until the piece is read).
enum Piece<'a> {
    Delegated(Arc<Route>),
    Routed(Arc<Route>, Admitted<&'a Gate<String, String>, String>),
}
