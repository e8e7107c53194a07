package topology

import "time"

// claim is one host's latest evidence of being primary.
type claim struct {
	index    int
	timeline uint32    // 0: unknown
	sentAt   time.Time // send time of the successful probe that saw it out of recovery
}

// decision is the outcome of the primary tracking rules.
type decision struct {
	primary   int // -1: none
	confirmed time.Time
	conflict  bool
}

// decide applies the primary tracking rules to the claims still inside the
// lease at now:
//   - none: no primary (a failover in progress);
//   - exactly one: it is the primary;
//   - several: the strictly highest timeline wins; a tie at the top or an
//     unknown timeline among them is a conflict, and there is no primary
//     (fail closed).
func decide(claims []claim, now time.Time, lease time.Duration) decision {
	d := decision{primary: -1}
	best, n := -1, 0
	tie, unknown := false, false
	for i, c := range claims {
		if now.Sub(c.sentAt) >= lease {
			continue
		}
		n++
		if c.timeline == 0 {
			unknown = true
		}
		switch {
		case best < 0 || c.timeline > claims[best].timeline:
			best, tie = i, false
		case c.timeline == claims[best].timeline:
			tie = true
		}
	}
	switch {
	case n == 0:
	case n == 1:
		d.primary, d.confirmed = claims[best].index, claims[best].sentAt
	case tie || unknown:
		d.conflict = true
	default:
		d.primary, d.confirmed = claims[best].index, claims[best].sentAt
	}
	return d
}
