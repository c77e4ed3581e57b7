package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/compositor-dev/compositor/webhooks"
)

// The floor is a webhook that does nothing: it decodes each AdmissionReview and allows
// it, and answers each ConversionReview with its objects relabelled to the desired
// version. It runs on the same server stack as Compositor's webhooks (controller-runtime's
// webhook server: TLS, HTTP/2), in a process of its own, so that every figure of
// Compositor's can be read as a ratio to what the stack alone costs on this machine.

// floorCommand is the argument that makes this program serve the floor.
const floorCommand = "floor"

// serveFloor serves the floor on 127.0.0.1:port with the certificate in certDir until
// the process is stopped.
func serveFloor(certDir string, port int) error {
	log.SetLogger(logr.Discard())
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir})
	allow := admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})
	srv.Register(webhooks.MutatePath, &admission.Webhook{Handler: allow})
	srv.Register(webhooks.ValidatePath, &admission.Webhook{Handler: allow})
	srv.Register(webhooks.ConvertPath, http.HandlerFunc(relabel))
	return srv.Start(context.Background())
}

// relabel answers a ConversionReview by setting the desired apiVersion on every object.
func relabel(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	review := &apiextensionsv1.ConversionReview{}
	if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
		http.Error(w, "not a ConversionReview", http.StatusBadRequest)
		return
	}
	converted := make([]runtime.RawExtension, len(review.Request.Objects))
	for i, raw := range review.Request.Objects {
		obj := map[string]any{}
		if err := json.Unmarshal(raw.Raw, &obj); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		obj["apiVersion"] = review.Request.DesiredAPIVersion
		b, err := json.Marshal(obj)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		converted[i] = runtime.RawExtension{Raw: b}
	}
	review.Response = &apiextensionsv1.ConversionResponse{UID: review.Request.UID, ConvertedObjects: converted, Result: successStatus}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

// floor is the floor's process, started by the harness.
type floor struct {
	cmd *exec.Cmd
	*endpoint
}

// startFloor starts the floor in a process of its own, with a fresh self-signed
// certificate for 127.0.0.1 written into dir, and waits until it answers.
func startFloor(ctx context.Context, dir string) (*floor, error) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "floor-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(certDir, "tls.crt"), certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(certDir, "tls.key"), keyPEM, 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, floorCommand, certDir, strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the floor webhook: %w", err)
	}
	e, err := newEndpoint("floor", fmt.Sprintf("https://127.0.0.1:%d", port), certPEM, cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	f := &floor{cmd: cmd, endpoint: e}
	if err := waitAnswering(ctx, e); err != nil {
		f.stop()
		return nil, fmt.Errorf("the floor webhook: %w", err)
	}
	return f, nil
}

func (f *floor) stop() {
	_ = f.cmd.Process.Kill()
	_ = f.cmd.Wait()
}

// waitAnswering waits until e answers an admission review.
func waitAnswering(ctx context.Context, e *endpoint) error {
	probe := call{path: webhooks.ValidatePath, body: probeReview(), check: func([]byte) error { return nil }}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := send(ctx, e, probe)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering after 30s: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePort returns a loopback TCP port that is free now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
