package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/store"
)

// PoolRow is one pool's recorded availability, as `gpuq pools -o json`
// prints it.
type PoolRow struct {
	Pool string `json:"pool"`
	// From and Until bound the buckets summarised.
	From  time.Time `json:"from"`
	Until time.Time `json:"until"`
	// Availability is the share of observed ticks the pool had capacity.
	Availability float64 `json:"availability"`
	Ticks        int     `json:"ticks"`
	UpRuns       int     `json:"up_runs"`
	// Up and For are the pool's state at its last observation and how long
	// it had been in it.
	Up                 bool          `json:"up"`
	For                time.Duration `json:"for"`
	Launches           int           `json:"launches"`
	NoCapacity         int           `json:"no_capacity"`
	Preemptions        int           `json:"preemptions"`
	PreemptionsPerHour float64       `json:"preemptions_per_hour"`
	Price              *policy.Money `json:"price_per_hour,omitempty"`
	// UpSpells and DownSpells count the runs of capacity and the outages
	// seen to end by their length in spells of Spell, rounded: [n] those of
	// n+1 spells (the first also those shorter than one), the last those of
	// 12 or more. The spot strategy's look-ahead models the pool from them.
	UpSpells   [queue.PoolSpellBuckets]int32 `json:"up_spells"`
	DownSpells [queue.PoolSpellBuckets]int32 `json:"down_spells"`
	Spell      time.Duration                 `json:"spell"`
	// History is every bucket, with --history.
	History []queue.PoolBucket `json:"history,omitempty"`
}

func newPoolsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pools",
		Short: "Each pool's recorded availability, preemption rate and price (from PostgreSQL)",
		Long: `pools reads the availability every server has recorded for each pool: offer refreshes,
launches that succeeded or found no capacity, and preempted attempts. It shows the share of
observations with capacity, the pool's state now and for how long, the outages seen to end and
their median length (in the spot strategy's 10-minute spells), its preemptions per hour and its
latest price; --history lists the recorded buckets, recent ones fine and older ones merged.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			format, err := outputFormat(v)
			if err != nil {
				return err
			}
			since := v.GetDuration("since")
			if since < 0 {
				return fmt.Errorf("--since: must not be negative, got %s", since)
			}
			dbURL, err := required(v, "database-url")
			if err != nil {
				return err
			}
			s, err := store.Open(cmd.Context(), dbURL)
			if err != nil {
				return redactErr(err, dbURL)
			}
			defer s.Close()
			var from time.Time
			if since > 0 {
				from = time.Now().Add(-since)
			}
			buckets, err := s.PoolBuckets(cmd.Context(), v.GetString("pool"), from)
			if err != nil {
				return err
			}
			rows := poolRows(buckets, s.HistoryTick(), v.GetBool("history"))
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			if v.GetBool("history") {
				t := newTable(cmd.OutOrStdout(), "POOL", "FROM", "WIDTH", "AVAILABLE", "TICKS", "LAUNCHES", "NO CAPACITY", "PREEMPTIONS", "PRICE/H")
				for _, r := range rows {
					for _, b := range r.History {
						t.row(b.Pool, b.Start.Format(time.DateTime), b.Width, percent(b.Availability(), b.Ticks), b.Ticks,
							b.Launches, b.NoCapacity, b.Preemptions, priceOf(b))
					}
				}
				return t.flush()
			}
			t := newTable(cmd.OutOrStdout(), "POOL", "SINCE", "AVAILABLE", "NOW", "UP RUNS", "OUTAGES", "LAUNCHES", "NO CAPACITY", "PREEMPTIONS", "PER HOUR", "PRICE/H")
			for _, r := range rows {
				now := "down"
				if r.Up {
					now = "up"
				}
				if r.Ticks == 0 {
					now = "-"
				} else {
					now += " " + r.For.String()
				}
				price := "-"
				if r.Price != nil {
					price = r.Price.String()
				}
				t.row(r.Pool, r.From.Format(time.DateTime), percent(r.Availability, r.Ticks), now, r.UpRuns, outages(r), r.Launches,
					r.NoCapacity, r.Preemptions, fmt.Sprintf("%.2f", r.PreemptionsPerHour), price)
			}
			return t.flush()
		},
	}
	connFlags(cmd)
	cmd.Flags().String("pool", "", "only this pool")
	cmd.Flags().Bool("history", false, "list every recorded bucket")
	cmd.Flags().Duration("since", 0, "only buckets from this long ago on (0: all that are kept)")
	return cmd
}

// poolRows folds each pool's buckets (oldest first, grouped by pool) into
// one row; tick is what one observation counts for.
func poolRows(buckets []queue.PoolBucket, tick time.Duration, history bool) []PoolRow {
	var rows []PoolRow
	var sum queue.PoolBucket
	flush := func() {
		if sum.Pool == "" {
			return
		}
		r := &rows[len(rows)-1]
		r.From, r.Until = sum.Start, sum.Start.Add(sum.Width)
		r.Availability, r.Ticks, r.UpRuns = sum.Availability(), sum.Ticks, sum.UpRuns
		r.Up, r.For = sum.LastUp, time.Duration(sum.TailRun)*tick
		r.Launches, r.NoCapacity, r.Preemptions = sum.Launches, sum.NoCapacity, sum.Preemptions
		r.PreemptionsPerHour = sum.PreemptionsPerHour()
		r.UpSpells, r.DownSpells = sum.Spells()
		r.Spell = time.Duration(max(sum.SpellTicks, 1)) * tick
		if sum.Currency != "" {
			r.Price = &policy.Money{Micros: sum.PriceMicros, Currency: sum.Currency}
		}
	}
	for _, b := range buckets {
		if b.Pool != sum.Pool {
			flush()
			rows = append(rows, PoolRow{Pool: b.Pool})
			sum = queue.PoolBucket{}
		}
		sum = sum.Merge(b)
		if history {
			rows[len(rows)-1].History = append(rows[len(rows)-1].History, b)
		}
	}
	flush()
	return rows
}

// outages is the number of outages seen to end and their median length,
// read from the spells they were counted in: "-" when none has ended.
func outages(r PoolRow) string {
	n := int32(0)
	for _, c := range r.DownSpells {
		n += c
	}
	if n == 0 {
		return "-"
	}
	median, seen := 0, int32(0)
	for i, c := range r.DownSpells {
		if seen += c; 2*seen >= n {
			median = i
			break
		}
	}
	// Lengths are rounded to whole spells: [i] holds those within half a
	// spell of i+1 spells, the first also the shorter ones, the last the
	// longer ones.
	var length string
	switch last := len(r.DownSpells) - 1; median {
	case 0:
		length = "<" + (r.Spell * 3 / 2).String()
	case last:
		length = "≥" + (r.Spell*time.Duration(last) + r.Spell/2).String()
	default:
		length = "≈" + (r.Spell * time.Duration(median+1)).String()
	}
	return fmt.Sprintf("%d, median %s", n, length)
}

func percent(share float64, ticks int) string {
	if ticks == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*share)
}

func priceOf(b queue.PoolBucket) string {
	if b.Currency == "" {
		return "-"
	}
	return policy.Money{Micros: b.PriceMicros, Currency: b.Currency}.String()
}
