package delayspec

import (
	"math"
	"strconv"
	"time"
)

// maxAgeUnits are a stream max-age's units in ms (rabbit_amqqueue:check_max_age: Y 365 days, M 30).
var maxAgeUnits = map[string]int64{"Y": 365 * 86_400_000, "M": 30 * 86_400_000, "D": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000}

// ParseMaxAge reads a max-age value ("<n><unit>", n > 0, unit Y M D h m or s), false if it is not.
func ParseMaxAge(v any) (time.Duration, bool) {
	s, ok := v.(string)
	if !ok {
		return 0, false
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	unit, ok := maxAgeUnits[s[i:]]
	if i == 0 || !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/unit/int64(time.Millisecond) {
		return 0, false
	}
	return time.Duration(n*unit) * time.Millisecond, true
}
