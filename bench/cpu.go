package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSample is the CPU time spent so far by the benchmark's process (the
// control plane, the workers and the embedded NATS server) and by the
// private PostgreSQL cluster (its postmaster, every live backend and every
// exited one).
type cpuSample struct {
	Process  time.Duration
	Postgres time.Duration
}

// cpuPerJob is the CPU time a run cost per job, in microseconds.
type cpuPerJob struct {
	Process  float64 `json:"process_us"`
	Postgres float64 `json:"postgres_us"`
}

// Total is the CPU time of both sides per job.
func (c cpuPerJob) Total() float64 { return c.Process + c.Postgres }

func (c cpuPerJob) String() string {
	return fmt.Sprintf("%.0f µs CPU per job (process %.0f, PostgreSQL %.0f)", c.Total(), c.Process, c.Postgres)
}

// perJob turns the CPU spent between two samples into CPU per job.
func (a cpuSample) perJob(b cpuSample, n int) cpuPerJob {
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(max(n, 1)) }
	return cpuPerJob{Process: us(b.Process - a.Process), Postgres: us(b.Postgres - a.Postgres)}
}

// sampleCPU reads the CPU time of this process and of the PostgreSQL
// cluster whose data directory is pgData. It reads /proc: elsewhere, or
// when the cluster's postmaster cannot be read, the PostgreSQL side is 0.
func sampleCPU(pgData string) cpuSample {
	var s cpuSample
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.Process = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s.Postgres = clusterCPU(pgData)
	return s
}

// clusterCPU sums the postmaster's own and waited-for children's CPU time
// with that of its live children (the backends and background processes).
func clusterCPU(pgData string) time.Duration {
	pidFile, err := os.ReadFile(filepath.Join(pgData, "postmaster.pid"))
	if err != nil {
		return 0
	}
	master, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
	if err != nil {
		return 0
	}
	ticks, _, ok := procCPU(master, true)
	if !ok {
		return 0
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == master {
			continue
		}
		if t, parent, ok := procCPU(pid, false); ok && parent == master {
			ticks += t
		}
	}
	// Linux reports these fields in clock ticks of USER_HZ, 100 a second
	// on every architecture Go supports here.
	return time.Duration(ticks) * (time.Second / 100)
}

// procCPU reads a process's user and system time in clock ticks (with
// withChildren, its waited-for children's too) and its parent's pid.
func procCPU(pid int, withChildren bool) (ticks int64, parent int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// The command name, in parentheses, may hold spaces: fields are
	// counted after its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15,
	// cutime 16, cstime 17.
	if len(f) < 15 {
		return 0, 0, false
	}
	parent, _ = strconv.Atoi(f[1])
	last := 13
	if withChildren {
		last = 15
	}
	for _, s := range f[11:last] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		ticks += v
	}
	return ticks, parent, true
}
