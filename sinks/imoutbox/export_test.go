package imoutbox

import "time"

// FastPathOnly switches p's compensation scan off, for tests of the fast
// path alone (outbox_worker.enabled=false switches both off).
func FastPathOnly(p *Publisher) { p.scan = false }

// SetFailureSummaryInterval shortens p's failure summary interval (tests).
func SetFailureSummaryInterval(p *Publisher, d time.Duration) {
	p.Service.opt.FailureSummaryInterval = d
}
