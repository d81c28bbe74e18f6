//! The double as a [`LockService`]: the real client's acquires, waits and `with_lock`.

use super::*;

impl LockService for MemoryLocks {
    type Lock = MemoryLock;

    async fn try_acquire(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
    ) -> Result<MemoryLock> {
        self.acquire_checked(resource.as_ref(), ttl, &RetryPolicy::once(), false)
            .await
    }

    async fn acquire(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
    ) -> Result<MemoryLock> {
        self.acquire_checked(resource.as_ref(), ttl, &self.client.config.retry, false)
            .await
    }

    async fn acquire_within(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<MemoryLock> {
        let policy = self.client.config.retry.within(max_wait);
        self.acquire_checked(resource.as_ref(), ttl, &policy, false)
            .await
    }

    async fn acquire_with(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> Result<MemoryLock> {
        self.acquire_checked(resource.as_ref(), ttl, policy, false)
            .await
    }

    async fn with_lock<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(LeaseSignal) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let policy = self.client.config.retry.clone();
        self.with_lock_using(resource, ttl, &policy, LeaseOptions::default(), work)
            .await
    }

    async fn with_lock_using<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        policy: &RetryPolicy,
        lease: LeaseOptions,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(LeaseSignal) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let resource = resource.as_ref();
        let lease = self
            .acquire_checked(resource, ttl, policy, false)
            .await?
            .into_lease(lease);
        lease::work_under(lease, self.client_address(), resource.to_vec(), work).await
    }

    async fn try_read(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
    ) -> Result<MemoryLock> {
        self.acquire_checked(resource.as_ref(), ttl, &RetryPolicy::once(), true)
            .await
    }

    async fn read(&self, resource: impl AsRef<[u8]> + Send, ttl: Duration) -> Result<MemoryLock> {
        self.acquire_checked(resource.as_ref(), ttl, &self.client.config.retry, true)
            .await
    }

    async fn read_within(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<MemoryLock> {
        let policy = self.client.config.retry.within(max_wait);
        self.acquire_checked(resource.as_ref(), ttl, &policy, true)
            .await
    }

    async fn read_with(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> Result<MemoryLock> {
        self.acquire_checked(resource.as_ref(), ttl, policy, true)
            .await
    }

    async fn with_read_lock<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(LeaseSignal) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let resource = resource.as_ref();
        let policy = self.client.config.retry.clone();
        let lease = self
            .acquire_checked(resource, ttl, &policy, true)
            .await?
            .into_lease(LeaseOptions::default());
        lease::work_under(lease, self.client_address(), resource.to_vec(), work).await
    }
}
