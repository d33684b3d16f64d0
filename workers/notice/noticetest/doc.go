// Package noticetest holds fake provider metadata services for tests: an
// EC2 instance metadata service (IMDSv2), a Compute Engine metadata server
// and Azure's Scheduled Events endpoint. Each follows the provider's
// documented paths, headers, status codes and bodies, and says what it
// assumes where the documentation is silent. Tests announce a notice through
// their methods (Interrupt, Set, Preempt) and read what the watcher did.
package noticetest
