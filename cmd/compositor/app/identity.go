package app

import (
	"context"
	"errors"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
)

// compositorUsers are the user names Compositor acts as against cfg, as the API server
// names them to admission: the status webhook admits their writes of a composition's
// status (with those of the generated controllers' ServiceAccounts). Every replica of
// one installation runs as the same user. Asked with a SelfSubjectReview, which every
// authenticated user may create (the system:basic-user role).
func compositorUsers(ctx context.Context, cfg *rest.Config) ([]string, error) {
	c, err := authenticationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	review, err := c.SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("learning the user Compositor acts as (a SelfSubjectReview): %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return nil, errors.New("learning the user Compositor acts as: the SelfSubjectReview names no user")
	}
	return []string{review.Status.UserInfo.Username}, nil
}
