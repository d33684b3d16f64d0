package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/db"
)

// RecordJobs records a batch of submissions in one transaction of three
// statements, whatever the batch size. A submission whose id or idempotency
// key is already recorded inserts nothing; the existing job is returned in
// its place, so redelivery and re-runs are harmless.
func (s *Store) RecordJobs(ctx context.Context, jobs []queue.NewJob) ([]*queue.Job, error) {
	recorded, _, err := s.RecordAndPlace(ctx, jobs, queue.Decided{})
	return recorded, err
}

// RecordAndPlace records a batch of submissions like RecordJobs and commits,
// in the same transaction, the placements and rejections decided for them
// beforehand (see CommitPlacements): a batch costs one commit, and no row is
// locked while placement is decided. A decision about a job that was already
// recorded takes effect only if the job is still waiting for it. It returns
// the jobs as recorded before the decisions and the placements that took
// effect.
func (s *Store) RecordAndPlace(ctx context.Context, jobs []queue.NewJob, d queue.Decided) ([]*queue.Job, []queue.PlacedJob, error) {
	var projects []string
	for _, nj := range jobs {
		if !slices.Contains(projects, nj.Spec.Project) {
			projects = append(projects, nj.Spec.Project)
		}
	}
	slices.Sort(projects)
	unknown := slices.DeleteFunc(slices.Clone(projects), func(p string) bool { _, ok := s.projects.Load(p); return ok })
	out := make([]*queue.Job, len(jobs))
	var done []queue.PlacedJob
	var snapshots []string
	err := s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		if len(unknown) > 0 {
			if err := q.ProjectEnsureMany(ctx, unknown); err != nil {
				return nil, fmt.Errorf("recording projects %v: %w", unknown, err)
			}
		}
		var err error
		if snapshots, err = s.storeSnapshots(ctx, q, d.Placed); err != nil {
			return nil, err
		}
		placed, failed, err := checkGuards(ctx, q, d.Placed)
		if err != nil {
			return nil, err
		}
		// A new job's first placement is recorded with the job, which is
		// inserted already placed; the other jobs are inserted waiting.
		first := make(map[uuid.UUID]queue.PlacedJob, len(placed))
		for _, p := range placed {
			if p.Placement.Version == 1 {
				first[p.JobID] = p
			}
		}
		var placedNew, waiting []queue.NewJob
		taken := make(map[uuid.UUID]bool, len(first))
		for _, nj := range jobs {
			if _, ok := first[nj.ID]; ok && !taken[nj.ID] {
				placedNew, taken[nj.ID] = append(placedNew, nj), true
			} else {
				waiting = append(waiting, nj)
			}
		}
		byID := make(map[uuid.UUID]db.JobRow, len(jobs))
		inserted, events, err := insertPlaced(ctx, q, placedNew, first)
		if err != nil {
			return nil, err
		}
		placedNow := make(map[uuid.UUID]bool, len(inserted))
		for _, r := range inserted {
			placedNow[r.ID] = true
			// As recorded before the decision: waiting.
			r.State, r.PlacementVersion, r.Pool = db.JobStatePending, 0, sql.NullString{}
			byID[r.ID] = r
			done = append(done, first[r.ID])
		}
		insertedWaiting, err := insertWaiting(ctx, q, waiting)
		if err != nil {
			return nil, err
		}
		insertedNow := maps.Clone(placedNow)
		for _, r := range insertedWaiting {
			byID[r.ID] = r
			insertedNow[r.ID] = true
			events = append(events, eventOf(r.ID, queue.StatePending, 0, "submitted", nil))
		}
		// A redelivered submission inserted nothing: its job is read as
		// recorded before.
		var missing []uuid.UUID
		for _, nj := range jobs {
			if _, ok := byID[nj.ID]; !ok {
				missing = append(missing, nj.ID)
			}
		}
		if len(missing) > 0 {
			rows, err := q.JobListByIDs(ctx, missing)
			if err != nil {
				return nil, fmt.Errorf("reading %d recorded jobs: %w", len(missing), err)
			}
			for _, r := range rows {
				byID[r.ID] = r
			}
		}
		for i, nj := range jobs {
			row, ok := byID[nj.ID]
			if !ok && nj.Spec.IdempotencyKey != "" {
				row, err = q.JobGetByIdempotencyKey(ctx, db.JobGetByIdempotencyKeyParams{Project: nj.Spec.Project, IdempotencyKey: sql.NullString{String: nj.Spec.IdempotencyKey, Valid: true}})
				ok = err == nil
			}
			if !ok {
				return nil, fmt.Errorf("finding the job recorded for submission %s: %w", nj.ID, errors.Join(err, queue.ErrNotFound))
			}
			if insertedNow[row.ID] && row.ID == nj.ID {
				// Inserted by this batch: its spec is the one just
				// encoded into the row, not decoded back from it.
				spec := *nj.Spec
				out[i] = jobWithoutSpec(row)
				out[i].Spec = &spec
				continue
			}
			if out[i], err = jobFromRow(row); err != nil {
				return nil, err
			}
		}
		// The decisions about jobs recorded before take effect only if
		// the jobs still wait for them.
		var rest []queue.PlacedJob
		for _, p := range placed {
			if !placedNow[p.JobID] {
				rest = append(rest, p)
			}
		}
		// Jobs that run after unfinished ones are recorded waiting, in id
		// order as rejections are.
		for _, id := range slices.SortedFunc(maps.Keys(d.Waiting), idOrder) {
			waiting, err := wait(ctx, q, id, 0, d.Waiting[id])
			if err != nil {
				return nil, fmt.Errorf("recording job %s waiting: %w", id, err)
			}
			events = append(events, waiting...)
		}
		moreDone, committed, err := applyDecisions(ctx, q, rest, d.Rejected, failed)
		done = append(done, moreDone...)
		return append(events, committed...), err
	})
	if err != nil {
		return nil, nil, err
	}
	for _, p := range unknown {
		s.projects.Store(p, true)
	}
	s.rememberSnapshots(ctx, snapshots)
	return out, done, nil
}

// newJobColumns are the columns of a batch of new jobs.
type newJobColumns struct {
	ids                                 []uuid.UUID
	projects, names, idempotency, specs []string
}

func columnsOfNewJobs(jobs []queue.NewJob) (newJobColumns, error) {
	n := len(jobs)
	c := newJobColumns{ids: make([]uuid.UUID, n), projects: make([]string, n), names: make([]string, n), idempotency: make([]string, n), specs: make([]string, n)}
	for i, nj := range jobs {
		spec, err := json.Marshal(nj.Spec)
		if err != nil {
			return c, err
		}
		c.ids[i], c.projects[i], c.names[i] = nj.ID, nj.Spec.Project, nj.Spec.Name
		c.idempotency[i], c.specs[i] = nj.Spec.IdempotencyKey, string(spec)
	}
	return c, nil
}

// insertWaiting records new jobs waiting for a placement and their
// "submitted" events, and returns the rows it inserted.
func insertWaiting(ctx context.Context, q *db.Queries, jobs []queue.NewJob) ([]db.JobRow, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	c, err := columnsOfNewJobs(jobs)
	if err != nil {
		return nil, err
	}
	rows, err := q.JobInsertMany(ctx, db.JobInsertManyParams{Ids: c.ids, Projects: c.projects, Names: c.names, IdempotencyKeys: c.idempotency, Specs: c.specs})
	if err != nil {
		return nil, fmt.Errorf("recording %d jobs: %w", len(jobs), err)
	}
	out := make([]db.JobRow, len(rows))
	for i, r := range rows {
		out[i] = db.JobRow(r)
	}
	return out, nil
}

// insertPlaced records new jobs already placed by first, with their
// placements and their "submitted" and "placed" events, and returns the
// rows it inserted and those events.
func insertPlaced(ctx context.Context, q *db.Queries, jobs []queue.NewJob, first map[uuid.UUID]queue.PlacedJob) ([]db.JobRow, []queue.Event, error) {
	if len(jobs) == 0 {
		return nil, nil, nil
	}
	c, err := columnsOfNewJobs(jobs)
	if err != nil {
		return nil, nil, err
	}
	placed := make([]queue.PlacedJob, len(jobs))
	for i, nj := range jobs {
		placed[i] = first[nj.ID]
	}
	pc, err := columnsOfPlacements(placed)
	if err != nil {
		return nil, nil, err
	}
	rows, err := q.JobInsertPlacedMany(ctx, db.JobInsertPlacedManyParams{
		Ids: c.ids, Projects: c.projects, Names: c.names, IdempotencyKeys: c.idempotency, Specs: c.specs,
		Pools: pc.pools, Regions: pc.regions, Residencies: pc.residencies, Countries: pc.countries,
		PriceMicros: pc.priceMicros, Currencies: pc.currencies, Decisions: pc.decisions,
		EstimateMicros: pc.estimateMicros, EstimateCurrencies: pc.estimateCurrencies, Providers: pc.providers,
		Snapshots: pc.snapshots, Recipes: pc.recipes,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("recording %d placed jobs: %w", len(jobs), err)
	}
	out := make([]db.JobRow, len(rows))
	events := make([]queue.Event, 0, 2*len(rows))
	for i, r := range rows {
		out[i] = db.JobRow(r)
		events = append(events, eventOf(r.ID, queue.StatePending, 0, "submitted", nil),
			eventOf(r.ID, queue.StatePlaced, 0, "placed on pool "+first[r.ID].Placement.Pool, nil))
	}
	return out, events, nil
}

// CommitPlacements commits decided placements and rejections in one
// transaction. Each placement's budget guards are first re-checked in SQL
// against the spend recorded now; a placement failing one is turned into a
// rejection with the guard's reason (a re-placement failing one is left
// out). A job that is running or finished, or was placed again meanwhile, is
// left alone; the returned slice holds the placements that took effect.
func (s *Store) CommitPlacements(ctx context.Context, d queue.Decided) ([]queue.PlacedJob, error) {
	if len(d.Placed) == 0 && len(d.Rejected) == 0 {
		return nil, nil
	}
	var done []queue.PlacedJob
	var snapshots []string
	err := s.inTx(ctx, func(q *db.Queries) ([]queue.Event, error) {
		var events []queue.Event
		var err error
		if snapshots, err = s.storeSnapshots(ctx, q, d.Placed); err != nil {
			return nil, err
		}
		done, events, err = commitPlacements(ctx, q, d)
		return events, err
	})
	if err == nil {
		s.rememberSnapshots(ctx, snapshots)
	}
	return done, err
}

func commitPlacements(ctx context.Context, q *db.Queries, d queue.Decided) ([]queue.PlacedJob, []queue.Event, error) {
	placed, failed, err := checkGuards(ctx, q, d.Placed)
	if err != nil {
		return nil, nil, err
	}
	return applyDecisions(ctx, q, placed, d.Rejected, failed)
}

// applyDecisions rejects the jobs of rejections (decided, or failed at
// their budget guards) and moves the jobs of placed to their placements.
func applyDecisions(ctx context.Context, q *db.Queries, placed []queue.PlacedJob, rejections ...map[uuid.UUID]string) ([]queue.PlacedJob, []queue.Event, error) {
	var rejected []uuid.UUID
	reasons := map[uuid.UUID]string{}
	for _, m := range rejections {
		for id, reason := range m {
			rejected, reasons[id] = append(rejected, id), reason
		}
	}
	// In id order, so that concurrent commits lock job rows in one order.
	sort.Slice(rejected, func(i, j int) bool { return rejected[i].String() < rejected[j].String() })
	var events []queue.Event
	for _, id := range rejected {
		n, err := q.JobReject(ctx, db.JobRejectParams{ID: id, Reason: reasons[id]})
		if err != nil {
			return nil, nil, fmt.Errorf("rejecting job %s: %w", id, err)
		}
		if n == 0 {
			continue
		}
		ev, err := recordEvent(ctx, q, id, queue.StateRejected, 0, reasons[id], nil)
		if err != nil {
			return nil, nil, fmt.Errorf("recording the rejection of job %s: %w", id, err)
		}
		events = append(events, ev)
	}
	done, placedEvents, err := placeMany(ctx, q, placed)
	return done, append(events, placedEvents...), err
}

// checkGuards re-checks the budget guards of placements against what each
// project has used: the spend recorded now plus what its unfinished jobs
// still reserve. It first takes each guarded project's budget lock, in name
// order, so that concurrent commits for one project run one after the other
// and each sees the reservations of those before it. Within the batch,
// placements are taken in order: each one that holds adds its cost to its
// project's use before the next is checked. It splits them into those that
// hold and the reasons of those that failed.
func checkGuards(ctx context.Context, q *db.Queries, placed []queue.PlacedJob) ([]queue.PlacedJob, map[uuid.UUID]string, error) {
	var params db.ProjectBudgetUseParams
	var owner []int
	var projects []string
	for i, p := range placed {
		for _, g := range p.Placement.Guards {
			n := int32(len(owner))
			params.Guards = append(params.Guards, n)
			params.Projects = append(params.Projects, g.Project)
			params.Since = append(params.Since, g.Since.UTC())
			for c, r := range g.Rates {
				params.RateGuards = append(params.RateGuards, n)
				params.RateCurrencies = append(params.RateCurrencies, c)
				params.RateMicros = append(params.RateMicros, r)
			}
			owner = append(owner, i)
			if !slices.Contains(projects, g.Project) {
				projects = append(projects, g.Project)
			}
		}
	}
	if len(owner) == 0 {
		return placed, nil, nil
	}
	slices.Sort(projects)
	for _, project := range projects {
		if err := q.ProjectBudgetLock(ctx, project); err != nil {
			return nil, nil, fmt.Errorf("locking the budgets of project %s: %w", project, err)
		}
	}
	// A job placed again releases its old reservation for the new one.
	params.Exclude = make([]uuid.UUID, len(placed))
	for i, p := range placed {
		params.Exclude[i] = p.JobID
	}
	use, err := q.ProjectBudgetUse(ctx, params)
	if err != nil {
		return nil, nil, fmt.Errorf("re-checking %d budget guards: %w", len(owner), err)
	}
	if len(use) != len(owner) {
		return nil, nil, fmt.Errorf("re-checking %d budget guards: %d answered", len(owner), len(use))
	}
	failed := map[uuid.UUID]string{}
	added := map[string]int64{} // per project: the cost of this batch's placements that held
	kept := make([]queue.PlacedJob, 0, len(placed))
	for i, p := range placed {
		first := slices.Index(owner, i)
		if first < 0 {
			kept = append(kept, p)
			continue
		}
		ok := true
		for k, g := range p.Placement.Guards {
			u := use[first+k]
			if u.Unknown || addSat(addSat(u.UsedMicros, added[g.Project]), g.CostMicros) > g.LimitMicros {
				failed[p.JobID], ok = g.Reason, false
				break
			}
		}
		if !ok {
			continue
		}
		kept = append(kept, p)
		if len(p.Placement.Guards) > 0 {
			g := p.Placement.Guards[0]
			added[g.Project] = addSat(added[g.Project], g.CostMicros)
		}
	}
	return kept, failed, nil
}

// addSat adds non-negative micros, saturating instead of overflowing.
func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

// placementColumns are the columns of a batch of placements, as
// JobPlaceMany and JobInsertPlacedMany record them.
type placementColumns struct {
	pools, regions, residencies, countries, currencies, decisions []string
	estimateCurrencies, providers, snapshots, recipes             []string
	priceMicros, estimateMicros                                   []int64
}

func columnsOfPlacements(placed []queue.PlacedJob) (placementColumns, error) {
	n := len(placed)
	c := placementColumns{
		pools: make([]string, n), regions: make([]string, n), residencies: make([]string, n), countries: make([]string, n),
		currencies: make([]string, n), decisions: make([]string, n), estimateCurrencies: make([]string, n),
		providers: make([]string, n), snapshots: make([]string, n), recipes: make([]string, n),
		priceMicros: make([]int64, n), estimateMicros: make([]int64, n),
	}
	for i, p := range placed {
		decision := p.Placement.Decision
		if len(decision) == 0 {
			decision = []byte("{}")
		}
		for _, country := range p.Placement.Countries {
			if strings.Contains(country, ",") {
				return c, fmt.Errorf("placement of job %s: country %q must not contain a comma", p.JobID, country)
			}
		}
		c.pools[i], c.regions[i], c.residencies[i] = p.Placement.Pool, p.Placement.Region, p.Placement.Residency
		c.countries[i], c.decisions[i] = strings.Join(p.Placement.Countries, ","), string(decision)
		c.priceMicros[i], c.currencies[i] = p.Placement.PriceMicros, p.Placement.Currency
		c.estimateMicros[i], c.estimateCurrencies[i] = max(p.Placement.EstimateMicros, 0), p.Placement.EstimateCurrency
		c.providers[i] = p.Placement.Provider
		c.recipes[i] = "{}"
		if r := p.Placement.Replay; r != nil {
			c.snapshots[i], c.recipes[i] = r.SnapshotID, string(r.Recipe)
		}
	}
	return c, nil
}

// placeMany moves each job to its next placement and stores the placement
// with its decision and price, in one statement.
func placeMany(ctx context.Context, q *db.Queries, placed []queue.PlacedJob) ([]queue.PlacedJob, []queue.Event, error) {
	if len(placed) == 0 {
		return nil, nil, nil
	}
	n := len(placed)
	pc, err := columnsOfPlacements(placed)
	if err != nil {
		return nil, nil, err
	}
	params := db.JobPlaceManyParams{
		JobIds: make([]uuid.UUID, n), Versions: make([]int32, n), Pools: pc.pools, Regions: pc.regions,
		Residencies: pc.residencies, Countries: pc.countries, PriceMicros: pc.priceMicros,
		Currencies: pc.currencies, Decisions: pc.decisions,
		EstimateMicros: pc.estimateMicros, EstimateCurrencies: pc.estimateCurrencies, Providers: pc.providers,
		Snapshots: pc.snapshots, Recipes: pc.recipes,
	}
	byID := make(map[uuid.UUID]queue.PlacedJob, n)
	for i, p := range placed {
		params.JobIds[i], params.Versions[i] = p.JobID, int32(p.Placement.Version)
		byID[p.JobID] = p
	}
	rows, err := q.JobPlaceMany(ctx, params)
	if err != nil {
		return nil, nil, fmt.Errorf("recording %d placements: %w", n, err)
	}
	done := make([]queue.PlacedJob, len(rows))
	events := make([]queue.Event, len(rows))
	for i, row := range rows {
		p := byID[row.JobID]
		msg := "placed on pool " + p.Placement.Pool
		if p.Placement.Version > 1 {
			msg = fmt.Sprintf("re-placed on pool %s (placement %d)", p.Placement.Pool, p.Placement.Version)
		}
		done[i], events[i] = p, eventOf(row.JobID, queue.StatePlaced, int(row.Attempt), msg, nil)
	}
	return done, events, nil
}

// Spend returns what a project's attempts started since a time have cost so
// far, in micros per currency. Running attempts count up to their last
// heartbeat, so spend is known as it accrues.
func (s *Store) Spend(ctx context.Context, project string, since time.Time) (map[string]int64, error) {
	rows, err := s.q.AttemptSpendByProject(ctx, db.AttemptSpendByProjectParams{Project: project, Since: since})
	if err != nil {
		return nil, fmt.Errorf("summing the spend of project %s: %w", project, err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Currency] = r.Micros
	}
	return out, nil
}

// JobSpend returns what job's attempts have cost so far, in micros per
// currency: each attempt's price over its run time, up to its last
// heartbeat while it runs.
func (s *Store) JobSpend(ctx context.Context, job uuid.UUID) (map[string]int64, error) {
	rows, err := s.q.JobSpend(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("summing the spend of job %s: %w", job, err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Currency] = r.Micros
	}
	return out, nil
}

// RunningSpend lists every running job with what all its attempts have
// cost so far, per currency, and its spec's budget.total.
func (s *Store) RunningSpend(ctx context.Context) ([]queue.RunningSpend, error) {
	rows, err := s.q.RunningJobSpend(ctx)
	if err != nil {
		return nil, fmt.Errorf("summing the spend of running jobs: %w", err)
	}
	var out []queue.RunningSpend
	for _, r := range rows {
		if n := len(out); n == 0 || out[n-1].JobID != r.ID {
			out = append(out, queue.RunningSpend{JobID: r.ID, Project: r.Project, Attempt: int(r.Attempt), BudgetTotal: r.BudgetTotal, Micros: map[string]int64{}})
		}
		out[len(out)-1].Micros[r.Currency] = r.Micros
	}
	return out, nil
}

// RecordPlacements commits placements with no rejections (CommitPlacements).
func (s *Store) RecordPlacements(ctx context.Context, placed []queue.PlacedJob) ([]queue.PlacedJob, error) {
	return s.CommitPlacements(ctx, queue.Decided{Placed: placed})
}

// Charged is what a project's budgets are charged with when a placement is
// decided, in micros per currency: the spend of its attempts started since
// a time (Spend) plus what its unfinished jobs still reserve, each its
// placement's estimate less what it has accrued. The commit re-checks the
// same under the project's budget lock (CommitPlacements), so this snapshot
// only makes the decision's reason precise.
func (s *Store) Charged(ctx context.Context, project string, since time.Time) (map[string]int64, error) {
	out, err := s.Spend(ctx, project, since)
	if err != nil {
		return nil, err
	}
	reserved, err := s.Reserved(ctx, project)
	if err != nil {
		return nil, err
	}
	for c, micros := range reserved {
		out[c] = addSat(out[c], micros)
	}
	return out, nil
}

// Reserved is what a project's unfinished jobs still reserve against its
// budgets, in micros per currency.
func (s *Store) Reserved(ctx context.Context, project string) (map[string]int64, error) {
	rows, err := s.q.ProjectReservedByCurrency(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("summing the reservations of project %s: %w", project, err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Currency] = r.Micros
	}
	return out, nil
}

// Ledger lists the budget ledger of projects since a time, at most max
// lines (JobLedger): newest jobs first within each project.
func (s *Store) Ledger(ctx context.Context, projects []string, since time.Time, max int) ([]queue.LedgerEntry, error) {
	rows, err := s.q.JobLedger(ctx, db.JobLedgerParams{Projects: projects, Since: since, MaxRows: int32(max)})
	if err != nil {
		return nil, fmt.Errorf("reading the ledger of %v: %w", projects, err)
	}
	out := make([]queue.LedgerEntry, len(rows))
	for i, r := range rows {
		out[i] = queue.LedgerEntry{JobID: r.ID, Project: r.Project, Name: r.Name, State: queue.JobState(r.State),
			Provider: r.Provider, Region: r.Region, Pool: r.Pool, EstimateMicros: r.EstimateMicros,
			EstimateCurrency: r.EstimateCurrency, Currency: r.Currency, AccruedMicros: r.AccruedMicros}
	}
	return out, nil
}
