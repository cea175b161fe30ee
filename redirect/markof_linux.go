//go:build linux

package redirect

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// MarkOf is process pid's mark, 0 when it has none.
func (r *Redirector) MarkOf(pid uint32) (uint32, error) {
	m, err := r.marks()
	if err != nil {
		return 0, fmt.Errorf("redirect: mark of %d: %w", pid, err)
	}
	var mark uint32
	if err := m.Lookup(pid, &mark); errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("redirect: mark of %d: %w", pid, err)
	}
	return mark, nil
}
