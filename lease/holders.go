package lease

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
)

// Holder is who holds one slot: the worker and the job or check id it took
// the slot for.
type Holder struct {
	// Slot is the slot's index, i in keyFor(i).
	Slot int
	// Host is the holding worker's name; "" when the value does not name a
	// valid worker (a value some other writer set).
	Host string
	// ID is the job or check id the slot was taken for.
	ID string
}

// ReadHolders reads the holders of slots keyFor(0) .. keyFor(slots-1) in one
// round trip, free slots left out. It is how an operator sees who holds a
// bound; it takes nothing. The holder value's format ("<worker>#<id>") is
// this package's alone.
func ReadHolders(ctx context.Context, client redis.Cmdable, slots int, keyFor func(int) string) ([]Holder, error) {
	if slots < 1 {
		return nil, nil
	}
	keys := make([]string, min(slots, MaxSweepSlots))
	for i := range keys {
		keys[i] = keyFor(i)
	}
	vals, err := client.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, err
	}
	var holders []Holder
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		host, id, _ := strings.Cut(s, "#")
		if fleet.ValidateName(host) != nil {
			host = ""
		}
		holders = append(holders, Holder{Slot: i, Host: host, ID: id})
	}
	return holders, nil
}
