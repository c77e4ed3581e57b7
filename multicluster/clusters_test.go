package multicluster

import (
	"testing"

	"k8s.io/client-go/rest"
)

func TestNewRequiresNamespace(t *testing.T) {
	if _, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, Options{}); err == nil {
		t.Fatal("New without a namespace succeeded")
	}
}
